"""Records validated as Kafka's log validator does (issue 34).

weir used to check a batch's header and CRC and never the records inside. Each lie below was
accepted with a correct CRC; librdkafka then delivered offsets `[0,1,2,2,3,5,1005,7,7]` and
stalled at offset 8 of 19 without an error, and kafka-python stopped with CorruptRecordError:
one producer made a partition unreadable for everyone. Now each is refused with Kafka's error
code (CORRUPT_MESSAGE 2, INVALID_RECORD 87, INVALID_TIMESTAMP 32) and nothing is written: the
high watermark does not move and both clients read the partition to its end afterwards.

Also here: a `max_timestamp` that lies (sarama wrote -1: retention deleted fresh data; here
also lower and higher than the records) is replaced by the records' true one, which retention
and ListOffsets by timestamp then go by; `LogAppendTime` topics; timestamps outside
`message.timestamp.after.max.ms`. The batches are built by hand (tests/record_batches.py) and
sent as raw Produce v8 requests, the only way to send what no real client sends.
"""

from __future__ import annotations

import struct
import time

import pytest
from confluent_kafka import TopicPartition

import kafka_wire as kw
from clients import (CLIENT_TIMEOUT_S, Msg, kp_consume, kp_producer, rd_consume, rd_consumer, rd_create_topic,
                     rd_produce, rd_producer)
from record_batches import Batch, Rec, produce_v8

CORRUPT_MESSAGE = 2
INVALID_TIMESTAMP = 32
INVALID_RECORD = 87


def now_ms() -> int:
    return int(time.time() * 1000)


def good(n: int, tag: bytes) -> bytes:
    return Batch.of(n, ts=now_ms(), value=tag).encode()


def high_watermark(bootstrap: str, topic: str) -> int:
    c = rd_consumer(bootstrap)
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)[1]
    finally:
        c.close()


def lie(name: str) -> tuple[Batch, int]:
    """A batch with one lie, and the error Kafka answers it with."""
    b = Batch.of(3, ts=now_ms())
    code = INVALID_RECORD
    if name == "records_count 3 with 2 records":
        b = Batch.of(2, ts=now_ms())
        b.records_count = 3
    elif name == "offset delta 1000":
        b.records[2].offset_delta = 1000
    elif name == "offset delta repeated":
        b.records[2].offset_delta = 1
    elif name == "record length too long":
        b.records[1].length_lie = 4
    elif name == "record length too short":
        b.records[1].length_lie = -2
    elif name == "key length 2^30":
        b.records[0].key_len = 1 << 30
    elif name == "header count 2^31-1":
        b.records[0].header_count = (1 << 31) - 1
    elif name == "header count -1":
        b.records[0].header_count = -1
    elif name == "bytes after the last record":
        b.records.append(Rec(ts_delta=3, offset_delta=3))
        b.records_count = 3
    elif name == "codec 7":
        b.codec_bits = 7
        code = CORRUPT_MESSAGE
    elif name == "gzip bit on a plain body":
        b.codec_bits = 1
        code = CORRUPT_MESSAGE
    elif name == "LogAppendTime bit from a client":
        b.attributes = 0x08
        code = INVALID_TIMESTAMP
    elif name == "transactional bit without a producer id":
        b.attributes = 0x10
    elif name == "control batch from a client":
        b = Batch([Rec(key=b"\0\0\0\1", value=b"\0\0\0\0\0\0")], attributes=0x30, producer_id=7,
                  producer_epoch=0, base_timestamp=now_ms())
    elif name == "records_count 3 with 2 records, zstd":
        b = Batch.of(2, ts=now_ms())
        b.codec = 4
        b.records_count = 3
    elif name == "offset delta 1000, lz4":
        b.codec = 3
        b.records[2].offset_delta = 1000
    else:
        raise ValueError(name)
    return b, code


LIES = [
    "records_count 3 with 2 records", "offset delta 1000", "offset delta repeated", "record length too long",
    "record length too short", "key length 2^30", "header count 2^31-1", "header count -1",
    "bytes after the last record", "codec 7", "gzip bit on a plain body", "LogAppendTime bit from a client",
    "transactional bit without a producer id", "control batch from a client",
    "records_count 3 with 2 records, zstd", "offset delta 1000, lz4",
]


@pytest.mark.parametrize("name", LIES)
def test_a_lying_batch_is_refused_and_the_partition_stays_readable(broker, topic_name, name):
    b = broker.bootstrap
    rd_create_topic(b, topic_name, 1)
    first = produce_v8(b, topic_name, good(3, b"before"))
    assert (first.error, first.base_offset) == (0, 0)
    batch, code = lie(name)
    answer = produce_v8(b, topic_name, batch.encode())
    assert answer.error == code, f"{name}: {answer}"
    assert answer.message, f"{name}: the refusal says why"
    assert high_watermark(b, topic_name) == 3, f"{name}: the high watermark moved"
    after = produce_v8(b, topic_name, good(3, b"after"))
    assert (after.error, after.base_offset) == (0, 3)
    # Both clients read the partition to its end, every offset once, in order.
    for got in (rd_consume(b, topic_name, [0], 6), kp_consume(b, topic_name, [0], 6)):
        assert [r.offset for r in got] == list(range(6)), name
        assert [r.value for r in got] == [b"before"] * 3 + [b"after"] * 3


def test_keyless_records_on_a_compacted_topic_are_record_errors(broker, topic_name):
    b = broker.bootstrap
    rd_create_topic(b, topic_name, 1, config={"cleanup.policy": "compact"})
    batch = Batch.of(4, ts=now_ms())
    batch.records[1].key = None
    batch.records[3].key = None
    answer = produce_v8(b, topic_name, batch.encode())
    assert answer.error == INVALID_RECORD
    assert [i for i, _ in answer.record_errors] == [1, 3]
    assert all("without key" in (why or "") for _, why in answer.record_errors)
    assert high_watermark(b, topic_name) == 0


def test_timestamps_outside_the_topics_bounds_are_refused(broker_factory, topic_name):
    broker = broker_factory()
    b = broker.bootstrap
    rd_create_topic(b, topic_name, 1, config={"message.timestamp.before.max.ms": "86400000"})
    # Kafka 4's default message.timestamp.after.max.ms: an hour.
    batch = Batch.of(3, ts=now_ms())
    batch.records[2].ts_delta = 2 * 3_600_000
    answer = produce_v8(b, topic_name, batch.encode())
    assert answer.error == INVALID_TIMESTAMP, answer
    assert [i for i, _ in answer.record_errors] == [2]
    old = Batch.of(2, ts=now_ms() - 2 * 86_400_000)
    assert produce_v8(b, topic_name, old.encode()).error == INVALID_TIMESTAMP
    assert high_watermark(b, topic_name) == 0
    # A real client sees the error.
    p = kp_producer(b, retries=0)
    try:
        f = p.send(topic_name, key=b"k", value=b"v", partition=0, timestamp_ms=now_ms() + 3 * 3_600_000)
        with pytest.raises(Exception, match="(?i)timestamp"):
            f.get(timeout=CLIENT_TIMEOUT_S)
    finally:
        p.close()
    # In bounds: accepted.
    assert produce_v8(b, topic_name, Batch.of(2, ts=now_ms() - 3_600_000).encode()).error == 0


def fetch_headers(bootstrap: str, topic: str) -> list[tuple[int, int, int, int]]:
    """(base offset, attributes, base timestamp, max timestamp) of every batch weir serves
    from offset 0 (Fetch v4)."""
    s = kw.connect(bootstrap)
    try:
        s.sendall(kw.fetch(3, topic, 0, 0))
        _, body = kw.read_response(s)
    finally:
        s.close()
    [part] = kw.parse_fetch_v4(body)
    out = []
    recs = part["records"]
    pos = 0
    while pos + 61 <= len(recs):
        base, length = struct.unpack_from(">qi", recs, pos)
        attributes, _, base_ts, max_ts = struct.unpack_from(">hiqq", recs, pos + 21)
        out.append((base, attributes, base_ts, max_ts))
        pos += 12 + length
    return out


@pytest.mark.parametrize("codec", [0, 3])
def test_a_lying_max_timestamp_is_replaced_by_the_records_own(broker_factory, topic_name, codec):
    """sarama writes -1; others lower or higher than their records. Retention (an hour here)
    must keep them until their records are an hour old, ListOffsets by timestamp must find them,
    and what is served says the truth."""
    broker = broker_factory({"log.retention.check.interval.ms": "200"})
    b = broker.bootstrap
    rd_create_topic(b, topic_name, 1, config={"retention.ms": "3600000", "segment.bytes": "4096"})
    t0 = now_ms() - 1000
    values = b"x" * 1500
    sent = 0
    for i, wrong in enumerate([-1, t0 - 100_000, t0 + 10_000_000] * 4):
        batch = Batch.of(2, ts=t0 + 10 * i, value=values)
        batch.codec = codec
        batch.max_timestamp = wrong
        answer = produce_v8(b, topic_name, batch.encode())
        assert (answer.error, answer.base_offset) == (0, sent)
        sent += 2
    # Several retention passes over the closed segments.
    time.sleep(2.0)
    got = rd_consume(b, topic_name, [0], sent)
    assert [r.offset for r in got] == list(range(sent)), "retention deleted fresh records"
    for base, _, base_ts, max_ts in fetch_headers(b, topic_name):
        assert max_ts == base_ts + 1, f"batch at {base}: served max_timestamp {max_ts}, records' {base_ts + 1}"
    c = rd_consumer(b)
    try:
        [tp] = c.offsets_for_times([TopicPartition(topic_name, 0, t0 + 55)], timeout=10)
        assert tp.offset == 12, f"ListOffsets by timestamp: {tp}"
    finally:
        c.close()


def test_a_log_append_time_topic_stamps_the_broker_time(broker, topic_name):
    b = broker.bootstrap
    rd_create_topic(b, topic_name, 1, config={"message.timestamp.type": "LogAppendTime"})
    before = now_ms()
    answer = produce_v8(b, topic_name, Batch.of(3, ts=1_000).encode())
    after = now_ms()
    assert answer.error == 0
    assert before <= answer.log_append_time <= after, answer
    p = rd_producer(b)
    rd_produce(p, topic_name, [Msg(b"k", b"v", (), 5_000, 0)])
    got = rd_consume(b, topic_name, [0], 4)
    assert all(before <= r.timestamp <= now_ms() for r in got), got
    c = rd_consumer(b)
    try:
        c.assign([TopicPartition(topic_name, 0, 0)])
        msg = c.poll(CLIENT_TIMEOUT_S)
        assert msg is not None and msg.error() is None
        assert msg.timestamp()[0] == 2, "librdkafka sees TIMESTAMP_LOG_APPEND_TIME"
    finally:
        c.close()
