"""More data than fits in one segment or one cache, concurrent producers, and retention.

What a user notices: tens of MB across many segment files come back byte for byte, also after a
restart (read from disk, not memory); concurrent acks=all producers lose or duplicate nothing;
retention deletes old data by size and by time, and a consumer asking for a deleted offset is
reset to the earliest offset still held (MISSION.md, "Retention").
"""

from __future__ import annotations

import hashlib
import threading
import time

import confluent_kafka
import kafka
from confluent_kafka import TopicPartition

from clients import (Msg, kp_consume, kp_consumer, now_ms, rd_consume, rd_consumer, rd_create_topic,
                     rd_produce, rd_producer)

SEGMENT_BYTES = 1 << 20


def value_of(partition: int, i: int) -> bytes:
    seed = hashlib.sha256(f"{partition}/{i}".encode()).digest()
    return (seed * 32)[: 600 + (i % 7) * 100]  # 600..1200 bytes, incompressible-ish


def digest(recs) -> str:
    h = hashlib.sha256()
    for r in recs:
        h.update(r.offset.to_bytes(8, "big") + (r.value or b""))
    return h.hexdigest()


def test_many_segments_round_trip_and_survive_restart(broker_factory, topic_name):
    b = broker_factory(settings={"log.segment.bytes": SEGMENT_BYTES})
    rd_create_topic(b.bootstrap, topic_name, 2)
    per_partition = 12_000  # ~10 MiB per partition: about ten segments each
    msgs = [Msg(None, value_of(p, i), (), None, p) for i in range(per_partition) for p in range(2)]
    rd_produce(rd_producer(b.bootstrap, acks="1", **{"linger.ms": 20, "batch.size": 262144}), topic_name, msgs,
               timeout=120)
    want = {p: digest([_R(i, value_of(p, i)) for i in range(per_partition)]) for p in range(2)}

    def check(label):
        for p in range(2):
            got = rd_consume(b.bootstrap, topic_name, [p], per_partition, timeout=120, extra_wait=0.2)
            assert [r.offset for r in got] == list(range(per_partition)), f"{label}: offsets of partition {p}"
            if digest(got) != want[p]:
                bad = [r.offset for r in got if r.value != value_of(p, r.offset)]
                first = got[bad[0]]
                raise AssertionError(
                    f"{label}: {len(bad)} records of partition {p} differ, offsets {bad[:5]}...{bad[-3:]}; "
                    f"offset {first.offset}: got {len(first.value or b'')} bytes {(first.value or b'')[:16].hex()}..., "
                    f"want {len(value_of(p, first.offset))} bytes {value_of(p, first.offset)[:16].hex()}...")

    check("fresh")
    segments = sorted(b.data_dir.rglob("*.log"))
    assert len(segments) >= 10, f"log.segment.bytes={SEGMENT_BYTES} but only {len(segments)} segment files"
    b.restart()
    check("after restart")
    # kafka-python from the middle of the log, across segment boundaries.
    got = kp_consume(b.bootstrap, topic_name, [1], 3000, offset=5000, timeout=120, extra_wait=0)
    assert [r.offset for r in got[:3000]] == list(range(5000, 8000))
    assert [r.value for r in got[:3000]] == [value_of(1, i) for i in range(5000, 8000)]


class _R:
    def __init__(self, offset, value):
        self.offset, self.value = offset, value


def test_concurrent_acks_all_producers(broker, topic_name):
    """Eight producers at once with acks=all (the broker shares fdatasyncs between them):
    every record is stored exactly once, each producer's records in its send order."""
    partitions = 4
    rd_create_topic(broker.bootstrap, topic_name, partitions)
    producers, per_producer = 8, 400
    errors: list[BaseException] = []

    def run(n):
        try:
            msgs = [Msg(f"p{n}".encode(), f"p{n}-{i}".encode(), (), None, (n + i) % partitions)
                    for i in range(per_producer)]
            rd_produce(rd_producer(broker.bootstrap, acks="all", **{"linger.ms": 1}), topic_name, msgs, timeout=60)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(producers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    assert not errors, f"producer failed: {errors[0]!r}"
    got = rd_consume(broker.bootstrap, topic_name, range(partitions), producers * per_producer, timeout=60)
    values = [r.value for r in got]
    assert len(values) == len(set(values)) == producers * per_producer, "lost or duplicated records"
    for p in range(partitions):
        offsets = [r.offset for r in got if r.partition == p]
        assert offsets == list(range(len(offsets))), f"offsets of partition {p}"
        for n in range(producers):
            seq = [int(r.value.split(b"-")[1]) for r in got if r.partition == p and r.key == f"p{n}".encode()]
            assert seq == sorted(seq), f"producer {n} out of order in partition {p}"


def low_watermark(bootstrap, topic, partition=0):
    c = rd_consumer(bootstrap)
    try:
        return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10, cached=False)
    finally:
        c.close()


def wait_for_low_watermark_above(bootstrap, topic, minimum, timeout=30.0, settle=1.0):
    """Waits until retention moved the log start past `minimum` and then stopped moving it
    for `settle` seconds (several retention passes: one pass may run while the last
    records are still arriving, and the next one deletes more)."""
    deadline = time.monotonic() + timeout
    last, since = None, time.monotonic()
    while True:
        low, high = low_watermark(bootstrap, topic)
        if (low, high) != last:
            last, since = (low, high), time.monotonic()
        elif low > minimum and time.monotonic() - since >= settle:
            return low, high
        assert time.monotonic() < deadline, f"log start offset {low} not settled above {minimum} after {timeout}s (log end {high})"
        time.sleep(0.1)


def fill(bootstrap, topic, n, ts=None):
    msgs = [Msg(None, value_of(0, i), (), ts, 0) for i in range(n)]
    rd_produce(rd_producer(bootstrap, acks="1", **{"linger.ms": 20}), topic, msgs, timeout=120)


def assert_consumers_reset_to(bootstrap, topic, low, high):
    """A consumer asking for offset 0 (deleted) is reset to the earliest offset still held."""
    k = kp_consumer(bootstrap)
    try:
        tp = kafka.TopicPartition(topic, 0)
        assert k.beginning_offsets([tp]) == {tp: low}
    finally:
        k.close()
    got = rd_consume(bootstrap, topic, [0], high - low, offset=0, timeout=60, extra_wait=0.2,
                     **{"auto.offset.reset": "earliest"})
    assert [r.offset for r in got] == list(range(low, high))
    assert [r.value for r in got] == [value_of(0, i) for i in range(low, high)]
    got = rd_consume(bootstrap, topic, [0], 1, offset=confluent_kafka.OFFSET_BEGINNING, extra_wait=0)
    assert got[0].offset == low


def test_retention_by_size(broker_factory, topic_name):
    b = broker_factory(settings={"log.retention.check.interval.ms": 200})
    rd_create_topic(b.bootstrap, topic_name, 1, config={"segment.bytes": str(SEGMENT_BYTES),
                                                         "retention.bytes": str(2 * SEGMENT_BYTES)})
    n = 9000  # ~8 MiB
    fill(b.bootstrap, topic_name, n)
    low, high = wait_for_low_watermark_above(b.bootstrap, topic_name, 0)
    assert high == n
    # What is left is about retention.bytes (plus the active segment), not much more or less.
    kept_bytes = sum(len(value_of(0, i)) for i in range(low, high))
    assert kept_bytes <= 4 * SEGMENT_BYTES, f"kept {kept_bytes} bytes with retention.bytes={2 * SEGMENT_BYTES}"
    assert kept_bytes >= 1 * SEGMENT_BYTES, f"kept only {kept_bytes} bytes with retention.bytes={2 * SEGMENT_BYTES}"
    assert_consumers_reset_to(b.bootstrap, topic_name, low, high)
    # And the log start offset stays moved after a restart.
    b.restart()
    assert low_watermark(b.bootstrap, topic_name) == (low, high)


def test_retention_by_time(broker_factory, topic_name):
    """Segments whose newest record is older than retention.ms are deleted; fresh data stays."""
    b = broker_factory(settings={"log.retention.check.interval.ms": 200})
    rd_create_topic(b.bootstrap, topic_name, 1, config={"segment.bytes": str(SEGMENT_BYTES),
                                                         "retention.ms": "3600000"})
    old = now_ms() - 24 * 3600 * 1000  # a day ago
    fill(b.bootstrap, topic_name, 4000, ts=old)  # ~3.5 MiB of day-old records
    fresh = [Msg(None, b"fresh-%d" % i, (), None, 0) for i in range(10)]
    rd_produce(rd_producer(b.bootstrap, acks="all"), topic_name, fresh)
    low, high = wait_for_low_watermark_above(b.bootstrap, topic_name, 0)
    assert high == 4010
    got = rd_consume(b.bootstrap, topic_name, [0], high - low, offset=0, timeout=60, extra_wait=0.2,
                     **{"auto.offset.reset": "earliest"})
    assert [r.offset for r in got] == list(range(low, high))
    assert [r.value for r in got[-10:]] == [m.value for m in fresh], "fresh records were deleted"
