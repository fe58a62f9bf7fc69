"""Tiered storage (issue 41, docs/tiered-storage.md) against a real S3 server: versitygw, built
from the Go module proxy and started by tests/s3_support.py, with weir's own S3 client
(object_store) signing real requests.

What a user would notice: a topic with `remote.storage.enable=true` keeps only
`local.retention.bytes` on the local disk while a consumer still reads it from offset 0,
every record once and in order; ListOffsets -4 / -5 (earliest local, latest tiered) say where
the tiers are; the store going away stops the uploads but loses nothing (and local retention
deletes nothing that is not uploaded), and past `remote.log.upload.backlog.max.bytes` produce
is refused with a retriable error that says why, until the store is back; kill -9 of the broker
in the middle of its uploads leaves no orphaned object and no hole.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import struct
import threading
import time
from pathlib import Path

import confluent_kafka
import pytest
from confluent_kafka.admin import NewTopic

import kafka_wire as kw
from clients import Msg, assert_exact, rd_admin, rd_consume, rd_create_topic, rd_produce, rd_producer
from java_support import classpath
from record_batches import Batch, produce_v8
from s3_support import S3Server
from test_java_clients import junit
from test_metrics import scrape, total

BUCKET = "weir-tier"
TOPIC = "tiered"


@pytest.fixture
def s3(tmp_path, monkeypatch):
    with S3Server(tmp_path / "s3") as server:
        server.create_bucket(BUCKET)
        # weir reads the credentials from the standard variables, as every S3 tool does.
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", server.access_key)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", server.secret_key)
        yield server


def tiered_settings(s3: S3Server) -> dict:
    return {
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.s3.bucket": BUCKET,
        "remote.log.storage.s3.endpoint": s3.endpoint,
        "remote.log.storage.s3.region": s3.region,
        "remote.log.manager.task.interval.ms": "200",
        "log.retention.check.interval.ms": "200",
    }


def messages(n: int, start: int = 0, value_bytes: int = 200) -> list[Msg]:
    t0 = int(time.time() * 1000) - 60_000
    return [Msg(f"k{i % 13}".encode(), f"{i:09d}|".encode().ljust(value_bytes, b"v"), (), t0 + i, 0)
            for i in range(start, start + n)]


def list_offset(bootstrap: str, timestamp: int) -> int:
    """ListOffsets of partition 0 at `timestamp` (-2 earliest, -4 earliest local, -5 latest
    tiered): the offset, after checking the error code."""
    sock = kw.connect(bootstrap)
    try:
        sock.sendall(kw.list_offsets_v4(7, TOPIC, 0, timestamp))
        _, body = kw.read_response(sock)
    finally:
        sock.close()
    error, offset, _ = kw.parse_list_offsets_v4(body)
    assert error == 0, f"ListOffsets {timestamp}: error {error}"
    return offset


# The objects of one remote segment (RemoteSegment::OBJECTS), by extension.
OBJECTS = ("epochs", "index", "log", "snapshot", "timeindex", "txnindex")


def manifest_keys(data_dir: Path, topic: str = TOPIC, partition: int = 0) -> list[str]:
    """The object keys the partition's manifest (`remote_segments`, storage/DESIGN.md) lists."""
    b = (data_dir / f"{topic}-{partition}" / "remote_segments").read_bytes()
    assert b[:8] == b"WEIRRSM1"
    (count,) = struct.unpack_from(">I", b, 16)
    keys = []
    for i in range(count):
        base, _next, _size, _ts, _crc, upload = struct.unpack_from(">QQQqIQ", b, 20 + 44 * i)
        keys += [f"{topic}-{partition}/{base:020d}-{upload:016x}.{ext}" for ext in OBJECTS]
    return sorted(keys)


def sealed_segment_sizes(data_dir: Path, topic: str = TOPIC, partition: int = 0) -> list[int]:
    """Sizes of the partition's local segments but the active one (sealed: indexes written),
    oldest first. The active segment's file is preallocated, its size says nothing."""
    d = data_dir / f"{topic}-{partition}"
    return [f.stat().st_size for f in sorted(d.glob("*.log")) if f.with_suffix(".index").exists()]


def wait_until(what: str, cond, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def create_tiered_topic(bootstrap: str, segment_bytes: int, local_bytes: int) -> None:
    rd_create_topic(bootstrap, TOPIC, 1, {
        "remote.storage.enable": "true",
        "segment.bytes": str(segment_bytes),
        "local.retention.bytes": str(local_bytes),
    })


def test_a_consumer_reads_a_tiered_topic_from_offset_zero_across_the_boundary(broker_factory, s3):
    broker = broker_factory(tiered_settings(s3))
    create_tiered_topic(broker.bootstrap, 256 << 10, 512 << 10)
    sent = messages(40_000)
    p = rd_producer(broker.bootstrap, **{"linger.ms": 20})
    rd_produce(p, TOPIC, sent)
    # Uploaded, then deleted locally down to local.retention.bytes (whole segments).
    local_start = wait_until("the local log start to move", lambda: list_offset(broker.bootstrap, -4))
    assert list_offset(broker.bootstrap, -2) == 0, "the log still starts at 0"
    tiered = list_offset(broker.bootstrap, -5)
    assert tiered >= local_start - 1, f"latest tiered {tiered}, earliest local {local_start}"
    # Between two uploads (one may be in flight now), the bucket holds what the manifest lists;
    # uploads go on until all but local.retention.bytes are up (8 MB of 256 KiB segments).
    wait_until("the bucket to hold what the manifest lists, over 1 MiB of segments", lambda: (
        (o := s3.list_objects(BUCKET, f"{TOPIC}-0/")) and sorted(k for k, _ in o) == manifest_keys(broker.data_dir)
        and sum(size for k, size in o if k.endswith(".log")) >= 1 << 20))
    # Local retention as Kafka applies retention.bytes: the oldest segment goes while the rest
    # would still hold local.retention.bytes.
    wait_until("local segments within local.retention.bytes",
               lambda: sum(sealed_segment_sizes(broker.data_dir)[1:]) < 512 << 10)
    # librdkafka from offset 0: remote segments, then local ones.
    got = rd_consume(broker.bootstrap, TOPIC, [0], len(sent), offset=confluent_kafka.OFFSET_BEGINNING)
    assert_exact(sent, got)
    # A fetch that starts inside a remote segment, and offsetsForTimes below the local start.
    got = rd_consume(broker.bootstrap, TOPIC, [0], len(sent) - 1234, offset=1234)
    assert_exact(sent[1234:], got, {0: 1234})
    c = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "ts"})
    try:
        [tp] = c.offsets_for_times([confluent_kafka.TopicPartition(TOPIC, 0, sent[777].timestamp)], timeout=10)
        assert tp.offset == 777
    finally:
        c.close()
    # The Java client (kafka-clients 4.4): ListOffsets earliest / earliestLocal / latestTiered,
    # and a consumer from offset 0.
    junit(classpath("clients"), broker.bootstrap, "TieredConsumerTest",
          props={"weir.tiered.topic": TOPIC, "weir.tiered.records": str(len(sent))})
    broker.check_alive()


def test_remote_storage_enable_needs_tiered_storage_on_the_broker(broker_factory):
    broker = broker_factory()
    admin = rd_admin(broker.bootstrap)
    fs = admin.create_topics([NewTopic(TOPIC, 1, 1, config={"remote.storage.enable": "true"})])
    with pytest.raises(confluent_kafka.KafkaException) as e:
        fs[TOPIC].result(10)
    err = e.value.args[0]
    assert err.code() == confluent_kafka.KafkaError.INVALID_CONFIG
    assert "Tiered Storage functionality is disabled" in err.str()


def test_the_store_going_away_loses_nothing_and_uploads_resume(broker_factory, s3):
    broker = broker_factory(tiered_settings(s3))
    create_tiered_topic(broker.bootstrap, 128 << 10, 256 << 10)
    first = messages(10_000)
    rd_produce(rd_producer(broker.bootstrap), TOPIC, first)
    start_before = wait_until("uploads", lambda: list_offset(broker.bootstrap, -4))
    time.sleep(1)  # the last closed segment uploaded too
    s3.stop()
    tiered_before = list_offset(broker.bootstrap, -5)
    more = messages(10_000, start=10_000)
    rd_produce(rd_producer(broker.bootstrap), TOPIC, more)
    time.sleep(2)  # tiering passes, every upload failing (the S3 client retrying meanwhile)
    # Nothing uploaded, so nothing of the new records deleted locally: all of it is still read.
    assert list_offset(broker.bootstrap, -5) == tiered_before
    assert list_offset(broker.bootstrap, -4) <= tiered_before + 1
    # What an operator sees: an upload lag that grows, and failing passes.
    wait_until("a failed tiering pass", lambda: total(scrape(broker), "weir_remote_errors_total") > 0)
    assert total(scrape(broker), "weir_remote_upload_lag_bytes", topic=TOPIC) > 1 << 20
    after = tiered_before + 1
    got = rd_consume(broker.bootstrap, TOPIC, [0], 20_000 - after, offset=after)
    assert_exact((first + more)[after:], got, {0: after})
    s3.start()
    wait_until("uploads to resume", lambda: list_offset(broker.bootstrap, -5) >= 15_000)
    wait_until("the upload lag to drain",
               lambda: total(scrape(broker), "weir_remote_upload_lag_bytes", topic=TOPIC) == 0)
    got = rd_consume(broker.bootstrap, TOPIC, [0], 20_000, offset=confluent_kafka.OFFSET_BEGINNING)
    assert_exact(first + more, got)
    assert start_before > 0


def test_the_store_down_past_the_backlog_bound_refuses_produce_until_it_returns(broker_factory, s3):
    broker = broker_factory({**tiered_settings(s3), "remote.log.upload.backlog.max.bytes": str(512 << 10)})
    b = broker.bootstrap
    create_tiered_topic(b, 128 << 10, 256 << 10)
    first = messages(4_000)
    # Record 0 carries the log's largest timestamp: ListOffsets -3 finds it in the store.
    first[0] = dataclasses.replace(first[0], timestamp=first[-1].timestamp + 60_000)
    # Batches smaller than a segment (one batch is never split: a 1 MB batch would be one segment).
    rd_produce(rd_producer(b, **{"batch.size": 16384}), TOPIC, first)
    wait_until("uploads", lambda: list_offset(b, -5) > 0 and list_offset(b, -4) > 0
               and total(scrape(broker), "weir_remote_upload_lag_bytes", topic=TOPIC) == 0)
    assert list_offset(b, -3) == 0, "MAX_TIMESTAMP: record 0, in the remote tier only"
    s3.stop()
    # Produce goes on to the local disk (the first failing pass takes the S3 client's retries)
    # until the closed segments waiting for upload pass the bound; then it is refused.
    accepted: list[bytes] = []
    deadline = time.monotonic() + 120
    while True:
        assert time.monotonic() < deadline, f"produce never refused ({len(accepted)} batches taken)"
        tag = b"%06d|" % len(accepted)
        answer = produce_v8(b, TOPIC, Batch.of(50, ts=int(time.time() * 1000), value=tag.ljust(200, b"r")).encode())
        if answer.error != 0:
            break
        accepted.append(tag.ljust(200, b"r"))
        time.sleep(0.02)
    assert answer.error == 56, f"refused with {answer}"  # KAFKA_STORAGE_ERROR: retriable
    assert "wait for upload" in (answer.message or ""), answer
    lag = total(scrape(broker), "weir_remote_upload_lag_bytes", topic=TOPIC)
    assert lag > 512 << 10, f"refused with {lag} bytes waiting, within the bound"
    written = len(first) + 50 * len(accepted)
    assert list_offset(b, -1) == written, "the refused batch was written"
    # A producer meanwhile: its records wait (retried), none is lost, none written twice.
    later = messages(1_000, start=written)
    result: dict = {}
    t = threading.Thread(target=lambda: result.update(
        got=rd_produce(rd_producer(b, **{"message.timeout.ms": 120_000, "enable.idempotence": True,
                                             "batch.size": 16384}),
                       TOPIC, later)))
    t.start()
    time.sleep(3)
    assert list_offset(b, -1) == written, "produce accepted with the store still down"
    s3.start()
    t.join(150)
    assert not t.is_alive() and len(result.get("got", [])) == len(later), "the waiting producer did not finish"
    wait_until("the backlog to upload", lambda: list_offset(b, -5) >= written - 1)
    got = rd_consume(b, TOPIC, [0], written + len(later), offset=confluent_kafka.OFFSET_BEGINNING)
    assert [r.offset for r in got] == list(range(written + len(later))), "every offset once, in order"
    want = [m.value for m in first] + [v for v in accepted for _ in range(50)] + [m.value for m in later]
    assert [r.value for r in got] == want
    assert total(scrape(broker), "weir_remote_upload_lag_bytes", topic=TOPIC) < 512 << 10
    broker.check_alive()


def test_kill9_during_uploads_leaves_no_orphan_and_no_hole(broker_factory, s3):
    broker = broker_factory(tiered_settings(s3))
    # 10 MiB segments: each upload is a multipart upload of two parts (8 MiB + the rest).
    create_tiered_topic(broker.bootstrap, 10 << 20, 10 << 20)
    # The store freezes (SIGSTOP: connections accepted, never answered) before anything is
    # written, so the upload of the first closed segment starts and cannot finish; the broker
    # is killed with it in flight.
    s3.proc.send_signal(signal.SIGSTOP)
    try:
        sent = messages(40_000, value_bytes=400)
        rd_produce(rd_producer(broker.bootstrap, **{"linger.ms": 20}), TOPIC, sent)
        time.sleep(1.5)  # a few tiering passes: the first one is stuck in its upload
        assert list_offset(broker.bootstrap, -5) == -1, "an upload finished with the store frozen"
        # And what a kill between an upload and the manifest leaves: an object nobody lists.
        broker.kill9()  # restarts at once: opening a tiered partition does not wait on the store
    finally:
        s3.proc.send_signal(signal.SIGCONT)
    s3.put_object(BUCKET, f"{TOPIC}-0/00000000000000000000-00000000000000ff.log", b"orphan")
    more = messages(40_000, start=len(sent), value_bytes=400)
    rd_produce(rd_producer(broker.bootstrap, **{"linger.ms": 20}), TOPIC, more)
    sent += more
    time.sleep(0.5)
    broker.kill9()  # again, at whatever point the uploads of the restart are
    wait_until("an upload", lambda: list_offset(broker.bootstrap, -5) >= 0)
    wait_until("the uploads to settle (orphans collected)",
               lambda: sorted(k for k, _ in s3.list_objects(BUCKET, f"{TOPIC}-0/")) == manifest_keys(broker.data_dir))
    got = rd_consume(broker.bootstrap, TOPIC, [0], len(sent), offset=confluent_kafka.OFFSET_BEGINNING)
    assert_exact(sent, got)


def test_read_committed_consumers_skip_aborted_transactions_read_from_the_store(broker_factory, s3):
    """Transactions on a tiered topic: a segment goes up only once no transaction in it is
    open, with the aborted ones it holds (`.txnindex`); a read_committed consumer from offset 0
    skips the aborted records read back from the store — also when the broker no longer has its
    own list of them (its `producer_state` file lost, as a replica that installed a snapshot
    has none below the snapshot point)."""
    broker = broker_factory(tiered_settings(s3))
    create_tiered_topic(broker.bootstrap, 64 << 10, 64 << 10)
    p = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "tiered-txn",
                                  "linger.ms": 5})
    p.init_transactions(30)
    committed: list[bytes] = []
    n = 0
    for round_ in range(12):
        abort = round_ % 3 == 1
        p.begin_transaction()
        for _ in range(200):
            value = f"{n:06d} {'abort' if abort else 'commit'} ".encode().ljust(300, b"x")
            p.produce(TOPIC, value, partition=0)
            if not abort:
                committed.append(value)
            n += 1
        p.flush(30)
        (p.abort_transaction if abort else p.commit_transaction)(30)
    # Plain records after the last transaction (incompressible: 180 KB) roll its segment out.
    tail = [os.urandom(150).hex().encode() for _ in range(600)]
    plain = rd_producer(broker.bootstrap)
    for v in tail:
        plain.produce(TOPIC, v, partition=0)
    plain.flush(30)
    committed += tail

    def read_committed() -> list[bytes]:
        c = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "tiered-rc",
                                      "isolation.level": "read_committed", "enable.auto.commit": False,
                                      "enable.partition.eof": True})
        got: list[bytes] = []
        try:
            c.assign([confluent_kafka.TopicPartition(TOPIC, 0, confluent_kafka.OFFSET_BEGINNING)])
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                m = c.poll(1.0)
                if m is None:
                    continue
                if m.error():
                    if m.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
                        break
                    raise AssertionError(f"consumer error {m.error()}")
                got.append(m.value())
            else:
                raise AssertionError(f"no end of partition within 60 s ({len(got)} records)")
        finally:
            c.close()
        return got

    # Every transaction is in remote segments gone from the local disk (the last marker is
    # at offset n + 11: 12 transactions of n records in all).
    wait_until("the last transaction's marker uploaded", lambda: list_offset(broker.bootstrap, -5) >= n + 11)
    wait_until("the transactions deleted locally", lambda: list_offset(broker.bootstrap, -4) > n + 11)
    assert any(k.endswith(".txnindex") for k, _ in s3.list_objects(BUCKET, f"{TOPIC}-0/"))
    assert read_committed() == committed
    broker.stop()
    (broker.data_dir / f"{TOPIC}-0" / "producer_state").unlink()
    broker.start()
    assert read_committed() == committed
    broker.check_alive()
