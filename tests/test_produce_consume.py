"""Produce with each client and each acks level, consume back exactly.

What a user notices: every record comes back with the key, value, headers and timestamp it was
sent with, in the order it was sent within its partition, at offsets 0, 1, 2, ...; compressed
batches come back equal; equal keys stay in one partition; a consumer can seek back and replay.
"""

from __future__ import annotations

import confluent_kafka
import kafka
import pytest

import kafka_wire
from kafka.partitioner.default import murmur2

from clients import (Msg, assert_exact, kp_consume, kp_produce, kp_producer,
                     rd_consume, rd_consumer, rd_create_topic, rd_poll, rd_produce, rd_producer,
                     sample_messages)

PARTITIONS = 3
N = 90


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_librdkafka_produce_consume_exact(broker, topic_name, acks):
    rd_create_topic(broker.bootstrap, topic_name, PARTITIONS)
    msgs = sample_messages(N, PARTITIONS)
    delivered = rd_produce(rd_producer(broker.bootstrap, acks=acks), topic_name, msgs)
    if acks != "0":
        # The delivery report carries the offset the broker assigned.
        per_partition: dict[int, list[int]] = {}
        for d in delivered:
            per_partition.setdefault(d.partition(), []).append(d.offset())
        for p, offsets in per_partition.items():
            assert offsets == list(range(len(offsets))), f"acked offsets in partition {p}"

    assert_exact(msgs, rd_consume(broker.bootstrap, topic_name, range(PARTITIONS), N))
    assert_exact(msgs, kp_consume(broker.bootstrap, topic_name, range(PARTITIONS), N))


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_kafka_python_produce_consume_exact(broker, topic_name, acks):
    rd_create_topic(broker.bootstrap, topic_name, PARTITIONS)
    msgs = sample_messages(N, PARTITIONS)
    producer = kp_producer(broker.bootstrap, acks=acks, enable_idempotence=False)
    try:
        metas = kp_produce(producer, topic_name, msgs)
    finally:
        producer.close(timeout=10)
    if acks != 0:
        per_partition: dict[int, list[int]] = {}
        for md in metas:
            per_partition.setdefault(md.partition, []).append(md.offset)
        for p, offsets in per_partition.items():
            assert offsets == list(range(len(offsets))), f"acked offsets in partition {p}"

    assert_exact(msgs, kp_consume(broker.bootstrap, topic_name, range(PARTITIONS), N))
    assert_exact(msgs, rd_consume(broker.bootstrap, topic_name, range(PARTITIONS), N))


def test_kafka_python_default_producer(broker, topic_name):
    """KafkaProducer() with no options — since kafka-python 3.0 that is an idempotent producer
    (InitProducerId, producer id and sequence numbers in the batches) — can produce."""
    rd_create_topic(broker.bootstrap, topic_name, 1)
    msgs = [Msg(f"k{i}".encode(), f"v{i}".encode(), (), None, 0) for i in range(20)]
    producer = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000,
                                   max_block_ms=20000, delivery_timeout_ms=30000)
    try:
        metas = kp_produce(producer, topic_name, msgs)
    finally:
        producer.close(timeout=10)
    assert [m.offset for m in metas] == list(range(20))
    got = rd_consume(broker.bootstrap, topic_name, [0], 20)
    assert [(r.key, r.value) for r in got] == [(m.key, m.value) for m in msgs]


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_pass_through(broker, topic_name, codec):
    rd_create_topic(broker.bootstrap, topic_name, 2)
    msgs = [Msg(f"key-{i}".encode(), (f"compressible value {i} " * 20).encode(),
                (("codec", codec.encode()),), 1_700_000_000_000 + i, i % 2) for i in range(400)]
    # librdkafka compresses whole batches; linger makes them multi-record.
    rd_produce(rd_producer(broker.bootstrap, **{"compression.type": codec, "linger.ms": 50,
                                                "acks": "all"}), topic_name, msgs)
    # The batches are stored as librdkafka compressed them (tests/test_kcat.py checks the
    # same with Debian's older librdkafka, which needs Produce v0 advertised to compress).
    want = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}[codec]
    sock = kafka_wire.connect(broker.bootstrap)
    try:
        sock.sendall(kafka_wire.fetch(1, topic_name, [(0, 0), (1, 0)], max_bytes=8 << 20))
        _, body = kafka_wire.read_response(sock)
    finally:
        sock.close()
    parts = kafka_wire.parse_fetch_v4(body)
    codecs = [c for p in parts for c in kafka_wire.batch_codecs(p["records"])]
    assert codecs and set(codecs) == {want}, f"stored batch codecs {codecs}, want {want}"
    stored = sum(p["records_size"] for p in parts)
    assert stored < sum(len(m.value) for m in msgs) / 3, f"{stored} bytes stored: not compressed"
    assert_exact(msgs, rd_consume(broker.bootstrap, topic_name, [0, 1], len(msgs)))
    assert_exact(msgs, kp_consume(broker.bootstrap, topic_name, [0, 1], len(msgs)))

    # And the other way round: kafka-python compresses, librdkafka decompresses.
    more = [Msg(m.key, m.value + b"!", m.headers, m.timestamp + 1000, m.partition) for m in msgs]
    producer = kp_producer(broker.bootstrap, compression_type=codec, acks="all", linger_ms=50,
                           enable_idempotence=False)
    try:
        kp_produce(producer, topic_name, more)
    finally:
        producer.close(timeout=10)
    got = rd_consume(broker.bootstrap, topic_name, [0, 1], 2 * len(msgs))
    assert_exact(msgs + more, got)


def test_key_hash_routing_keeps_equal_keys_together(broker, topic_name):
    """With no partition given, the client hashes the key; the broker must store each record in
    the partition the client chose, so equal keys end up in one partition, in send order."""
    rd_create_topic(broker.bootstrap, topic_name, 4)
    keys = [f"user-{k}".encode() for k in range(24)]
    msgs = [Msg(keys[i % len(keys)], f"event-{i}".encode()) for i in range(240)]

    # librdkafka's default partitioner (consistent_random: crc32 of the key).
    delivered = rd_produce(rd_producer(broker.bootstrap, acks="all"), topic_name, msgs)
    chosen = {}
    for d in delivered:
        chosen.setdefault(d.key(), set()).add(d.partition())
    assert all(len(ps) == 1 for ps in chosen.values()), "librdkafka split a key across partitions"
    assert len({next(iter(ps)) for ps in chosen.values()}) > 1, "all keys hashed to one partition"

    got = rd_consume(broker.bootstrap, topic_name, range(4), len(msgs))
    where: dict[bytes, set[int]] = {}
    for r in got:
        where.setdefault(r.key, set()).add(r.partition)
    assert where == chosen, "records are not in the partitions the producer chose"
    for key in keys:
        values = [r.value for r in sorted(got, key=lambda r: r.offset) if r.key == key]
        assert values == [m.value for m in msgs if m.key == key], f"order of key {key!r}"

    # kafka-python's default partitioner (murmur2, as the Java client).
    producer = kp_producer(broker.bootstrap, acks="all", enable_idempotence=False)
    try:
        metas = kp_produce(producer, f"{topic_name}", [Msg(m.key, b"kp-" + m.value) for m in msgs])
    finally:
        producer.close(timeout=10)
    for md, m in zip(metas, msgs):
        assert md.partition == (murmur2(m.key) & 0x7FFFFFFF) % 4
    got = kp_consume(broker.bootstrap, topic_name, range(4), 2 * len(msgs))
    for r in got:
        if r.value.startswith(b"kp-"):
            assert r.partition == (murmur2(r.key) & 0x7FFFFFFF) % 4, f"{r.key!r} in partition {r.partition}"


def test_seek_back_replays_and_fetch_inside_a_batch(broker, topic_name):
    """The broker keeps no delivery state: a consumer can start anywhere, even in the middle of
    a multi-record batch, and seek back to replay."""
    rd_create_topic(broker.bootstrap, topic_name, 1)
    msgs = [Msg(None, f"v{i}".encode(), (), None, 0) for i in range(50)]
    rd_produce(rd_producer(broker.bootstrap, **{"linger.ms": 100}), topic_name, msgs)

    got = rd_consume(broker.bootstrap, topic_name, [0], 25, offset=25)
    assert [r.offset for r in got] == list(range(25, 50))
    assert [r.value for r in got] == [m.value for m in msgs[25:]]

    c = rd_consumer(broker.bootstrap)
    try:
        c.assign([confluent_kafka.TopicPartition(topic_name, 0, 7)])
        first = rd_poll(c, 10)
        assert [r.offset for r in first] == list(range(7, 17))
        c.seek(confluent_kafka.TopicPartition(topic_name, 0, 3))
        again = rd_poll(c, 5)
        assert [r.offset for r in again] == [3, 4, 5, 6, 7]
        assert [r.value for r in again] == [b"v3", b"v4", b"v5", b"v6", b"v7"]
    finally:
        c.close()

    got = kp_consume(broker.bootstrap, topic_name, [0], 10, offset=40)
    assert [r.offset for r in got] == list(range(40, 50))


def test_out_of_range_offset_resets_to_earliest(broker, topic_name):
    """A fetch past the log end gets OFFSET_OUT_OF_RANGE, and the client's reset policy
    (auto.offset.reset=earliest) then restarts it at the beginning."""
    rd_create_topic(broker.bootstrap, topic_name, 1)
    msgs = [Msg(None, f"v{i}".encode(), (), None, 0) for i in range(10)]
    rd_produce(rd_producer(broker.bootstrap), topic_name, msgs)
    got = rd_consume(broker.bootstrap, topic_name, [0], 10, offset=1000, **{"auto.offset.reset": "earliest"})
    assert [r.offset for r in got] == list(range(10))
    got = kp_consume(broker.bootstrap, topic_name, [0], 10, offset=1000, auto_offset_reset="earliest")
    assert [r.offset for r in got] == list(range(10))


def test_large_record_bigger_than_partition_fetch_limit(broker, topic_name):
    """Kafka returns the first batch even when it is larger than the fetch's per-partition
    limit, so a consumer never gets stuck on a big record."""
    rd_create_topic(broker.bootstrap, topic_name, 1)
    big = bytes(range(256)) * (600 * 1024 // 256)  # 600 KiB
    msgs = [Msg(b"big", big, (), None, 0), Msg(b"small", b"after", (), None, 0)]
    rd_produce(rd_producer(broker.bootstrap, acks="all"), topic_name, msgs)
    got = rd_consume(broker.bootstrap, topic_name, [0], 2, **{"max.partition.fetch.bytes": 65536})
    assert [(r.key, r.value) for r in got] == [(b"big", big), (b"small", b"after")]
    got = kp_consume(broker.bootstrap, topic_name, [0], 2, max_partition_fetch_bytes=65536)
    assert [(r.key, r.value) for r in got] == [(b"big", big), (b"small", b"after")]


def test_pipelined_produce_keeps_partition_order(broker, topic_name):
    """Regression: records landed out of order within a partition.

    librdkafka keeps many Produce requests in flight on one connection (pipelining). Kafka
    appends a connection's requests in the order they arrive, so with no retries (here
    retries=0, and every delivery succeeds) each partition holds the records in send order.
    weir appended some batches out of order (a batch sent later got an earlier offset), seen
    in about half of the runs of this test. Each round: 4 partitions x 6000 records of ~700 bytes.
    """
    partitions, n = 4, 6000
    for round_ in range(8):
        topic = f"{topic_name}-{round_}"
        rd_create_topic(broker.bootstrap, topic, partitions)
        msgs = [Msg(None, b"%d|" % i + b"x" * 700, (), None, p) for i in range(n) for p in range(partitions)]
        rd_produce(rd_producer(broker.bootstrap, acks="1", **{"linger.ms": 5, "batch.size": 65536, "retries": 0}),
                   topic, msgs, timeout=120)
        got = rd_consume(broker.bootstrap, topic, range(partitions), partitions * n, timeout=120, extra_wait=0.1)
        for p in range(partitions):
            seq = [int(r.value.split(b"|")[0]) for r in got if r.partition == p]
            if seq != list(range(n)):
                k = next(k for k, v in enumerate(seq) if v != k)
                raise AssertionError(f"round {round_}, partition {p}: offset {k} holds record {seq[k]} "
                                     f"(records {seq[max(0, k - 2):k + 3]} at offsets {k - 2}..{k + 2})")
