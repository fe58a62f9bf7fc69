"""Idempotent producers (Kafka's semantics, without transactions): a retried batch — the same
producer id, epoch and sequence range — is answered with its original offset and not written
again, also after a kill -9; a sequence gap gets OUT_OF_ORDER_SEQUENCE_NUMBER (45); an older
epoch INVALID_PRODUCER_EPOCH (47). Before, weir wrote every retry again (duplicates for every
Java, kafka-python 3 and franz-go producer, idempotent by default).

The retries are sent as raw Produce v3 requests (the same bytes twice, as a client does when
an answer is lost); confluent-kafka and kafka-python idempotent producers check that real
clients see no spurious errors."""

from __future__ import annotations

import struct

from confluent_kafka import TopicPartition
from kafka.record.default_records import DefaultRecordBatchBuilder

import kafka_wire as kw
from clients import (CLIENT_TIMEOUT_S, Msg, kp_producer, rd_consume, rd_consumer, rd_create_topic, rd_produce,
                     rd_producer, wait_for_topic)

PID = 4711


def batch(pid: int, epoch: int, seq: int, values: list[bytes]) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=pid,
                                  producer_epoch=epoch, base_sequence=seq, batch_size=1 << 20)
    for i, v in enumerate(values):
        b.append(i, timestamp=1_700_000_000_000 + i, key=None, value=v, headers=[])
    return bytes(b.build())


def produce(bootstrap: str, topic: str, records: bytes) -> tuple[int, int]:
    """Produce v3, acks=-1, one partition (0): (error code, base offset)."""
    body = kw.string(None) + struct.pack(">hi", -1, 10_000)
    body += struct.pack(">i", 1) + kw.string(topic) + struct.pack(">i", 1)
    body += struct.pack(">ii", 0, len(records)) + records
    s = kw.connect(bootstrap)
    try:
        s.sendall(kw.frame(kw.API_PRODUCE, 3, 1, body))
        _, resp = kw.read_response(s)
    finally:
        s.close()
    # [topics: name, [partition int32, error int16, base_offset int64, log_append_time int64]]
    (n_topics,) = struct.unpack_from(">i", resp, 0)
    assert n_topics == 1
    (name_len,) = struct.unpack_from(">h", resp, 4)
    pos = 6 + name_len
    (n_parts,) = struct.unpack_from(">i", resp, pos)
    assert n_parts == 1
    _, error, base, _ = struct.unpack_from(">ihqq", resp, pos + 4)
    return error, base


def end_offset(bootstrap: str, topic: str) -> int:
    c = rd_consumer(bootstrap)
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)[1]
    finally:
        c.close()


def test_a_retried_batch_is_not_written_twice_even_after_kill9(broker, topic_name):
    b = broker.bootstrap
    rd_create_topic(b, topic_name, 1)
    first = batch(PID, 0, 0, [b"a", b"b", b"c"])
    assert produce(b, topic_name, first) == (0, 0)
    assert produce(b, topic_name, first) == (0, 0), "the retry is answered with the original offset"
    second = batch(PID, 0, 3, [b"d"])
    assert produce(b, topic_name, second) == (0, 3)
    assert end_offset(b, topic_name) == 4
    # A gap, and an older epoch after a newer one.
    assert produce(b, topic_name, batch(PID, 0, 9, [b"x"]))[0] == 45
    assert produce(b, topic_name, batch(PID + 1, 3, 0, [b"e"])) == (0, 4)
    assert produce(b, topic_name, batch(PID + 1, 2, 1, [b"x"]))[0] == 47
    # The broker dies; the client, which never got its answer, sends the batch again.
    broker.kill9()
    wait_for_topic(broker.bootstrap, topic_name, 1)
    assert produce(broker.bootstrap, topic_name, second) == (0, 3)
    assert produce(broker.bootstrap, topic_name, batch(PID, 0, 4, [b"f"])) == (0, 5)
    got = rd_consume(broker.bootstrap, topic_name, [0], 6)
    assert [r.value for r in got] == [b"a", b"b", b"c", b"d", b"e", b"f"]


def test_idempotent_clients_produce_exactly_once(broker, topic_name):
    """confluent-kafka (enable.idempotence=true, 5 in flight) and kafka-python
    (enable_idempotence=True) see no spurious sequence errors; each record is there once."""
    b = broker.bootstrap
    rd_create_topic(b, topic_name, 2)
    sent = [Msg(f"k{i % 7}".encode(), f"value-{i}".encode(), partition=i % 2) for i in range(2000)]
    p = rd_producer(b, **{"enable.idempotence": True, "max.in.flight.requests.per.connection": 5,
                          "linger.ms": 2, "batch.num.messages": 50})
    rd_produce(p, topic_name, sent[:1000])
    kp = kp_producer(b, enable_idempotence=True, acks="all", linger_ms=2)
    try:
        for m in sent[1000:]:
            kp.send(topic_name, key=m.key, value=m.value, partition=m.partition)
        kp.flush(timeout=CLIENT_TIMEOUT_S)
    finally:
        kp.close()
    got = rd_consume(b, topic_name, [0, 1], len(sent))
    assert sorted(repr((r.partition, r.value)) for r in got) == sorted(repr((m.partition, m.value)) for m in sent)
