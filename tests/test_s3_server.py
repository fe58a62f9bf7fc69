"""The S3 server the tiered-storage tests run (tests/s3_support.py) behaves as S3 does, so that
what they conclude about weir holds against a real store: round trips of large and multipart
objects, ranged GETs, listings by prefix across pages, deletes, signatures checked, and the data
kept when the server is killed and started again."""

from __future__ import annotations

import hashlib
import os

import pytest

from s3_support import S3Error, S3Server

MIB = 1 << 20


def test_the_s3_server_is_a_real_s3(tmp_path):
    with S3Server(tmp_path / "s3") as s3:
        s3.create_bucket("bkt")

        # A 5 MiB PUT comes back whole; its ETag is its MD5, as S3's.
        data = os.urandom(5 * MIB)
        etag = s3.put_object("bkt", "p/big", data)
        assert etag == f'"{hashlib.md5(data).hexdigest()}"'
        assert s3.get_object("bkt", "p/big") == data

        # Ranged GETs: exactly the bytes asked for (inclusive), with 206 and Content-Range.
        for first, last in [(0, 0), (1000, 1999), (3 * MIB - 7, 4 * MIB + 11), (5 * MIB - 10, 5 * MIB - 1)]:
            assert s3.get_object("bkt", "p/big", (first, last)) == data[first:last + 1]
        resp = s3.request("GET", "/bkt/p/big", headers={"Range": "bytes=100-199"})
        assert (resp.status, resp.headers["content-range"]) == (206, f"bytes 100-199/{5 * MIB}")
        assert s3.request("GET", "/bkt/p/big", headers={"Range": f"bytes={5 * MIB}-"}).status == 416

        # A multipart upload (weir uploads segments that way): a 5 MiB part and a short last one.
        parts = [os.urandom(5 * MIB), os.urandom(1234)]
        assert s3.multipart_upload("bkt", "p/multi", parts).endswith('-2"')
        assert s3.get_object("bkt", "p/multi") == b"".join(parts)

        # ListObjectsV2 by prefix, page after page; keys of other prefixes are not listed.
        keys = [f"q/{i:03d}" for i in range(25)]
        for k in keys:
            s3.put_object("bkt", k, k.encode())
        s3.put_object("bkt", "qq", b"not under q/")
        assert s3.list_objects("bkt", "q/", page_size=7) == [(k, 5) for k in keys]
        assert s3.list_objects("bkt", "p/") == [("p/big", 5 * MIB), ("p/multi", 5 * MIB + 1234)]

        # Delete: gone from GETs and listings.
        s3.delete_object("bkt", "q/000")
        with pytest.raises(S3Error) as e:
            s3.get_object("bkt", "q/000")
        assert (e.value.status, e.value.code) == (404, "NoSuchKey")
        assert [k for k, _ in s3.list_objects("bkt", "q/")] == keys[1:]

        # Signatures are checked: a wrong secret key is refused.
        with pytest.raises(S3Error) as e:
            s3.request_ok("GET", "/bkt/p/big", secret="not-the-secret")
        assert (e.value.status, e.value.code) == (403, "SignatureDoesNotMatch")

        # Killed and started again on the same port and directory: everything is still there.
        endpoint = s3.endpoint
        s3.kill()
        with pytest.raises(OSError):
            s3.request("GET", "/")
        s3.start()
        assert s3.endpoint == endpoint
        assert s3.get_object("bkt", "p/big") == data
        assert s3.get_object("bkt", "p/multi", (5 * MIB - 2, 5 * MIB + 1)) == b"".join(parts)[5 * MIB - 2:5 * MIB + 2]
        assert [k for k, _ in s3.list_objects("bkt", "q/")] == keys[1:]

        # A clean stop and start too.
        s3.stop()
        s3.start()
        assert s3.list_objects("bkt", "p/") == [("p/big", 5 * MIB), ("p/multi", 5 * MIB + 1234)]
