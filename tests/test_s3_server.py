"""The S3 server the tiered-storage tests run (tests/s3_support.py) behaves as S3 does, so
that what they conclude about weir holds against a real store: round trips, ranged GETs,
listings by prefix past one page, deletes, signatures checked, data kept across a restart."""

from __future__ import annotations

import os

import pytest

from s3_support import S3Error, S3Server


def test_the_s3_server_is_a_real_s3(tmp_path):
    with S3Server(tmp_path / "s3") as s3:
        s3.create_bucket("bkt")
        data = os.urandom(5 << 20)
        s3.put_object("bkt", "p/big", data)
        assert s3.get_object("bkt", "p/big") == data
        assert s3.get_object("bkt", "p/big", (1000, 1999)) == data[1000:2000]
        for i in range(1005):
            s3.put_object("bkt", f"q/{i:05d}", b"x")
        listed = s3.list_objects("bkt", "q/")
        assert [k for k, _ in listed] == [f"q/{i:05d}" for i in range(1005)], "pages followed"
        assert s3.list_objects("bkt", "p/") == [("p/big", 5 << 20)]
        s3.delete_object("bkt", "q/00000")
        assert len(s3.list_objects("bkt", "q/")) == 1004
        with pytest.raises(S3Error) as e:
            s3._ok("GET", "/bkt/p/big", secret="wrong")
        assert e.value.status == 403
        s3.kill()
        s3.start()
        assert s3.get_object("bkt", "p/big", (0, 9)) == data[:10]
