"""Topics and data survive a graceful restart (SIGTERM) and a crash (kill -9).

What a user notices: after the broker comes back, every topic is there with its partition count
and configs, every acknowledged record is there at the offset it was acknowledged at, and new
records continue from the old log end.
"""

from __future__ import annotations

import signal

import pytest
from confluent_kafka import TopicPartition

from clients import (Msg, assert_exact, kp_consume, rd_admin, rd_consume, rd_consumer, rd_create_topic,
                     rd_produce, rd_producer, rd_topic_configs, sample_messages, wait_for_topic)

PARTITIONS = 3


def watermarks(bootstrap, topic, partitions):
    c = rd_consumer(bootstrap)
    try:
        return [c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)
                for p in range(partitions)]
    finally:
        c.close()


def produce_acked(bootstrap, topic, msgs, acks="all"):
    """Produces and returns {partition: [acked offsets]}."""
    delivered = rd_produce(rd_producer(bootstrap, acks=acks), topic, msgs)
    acked: dict[int, list[int]] = {}
    for d in delivered:
        acked.setdefault(d.partition(), []).append(d.offset())
    return acked


@pytest.mark.parametrize("how", ["restart", "kill9"])
def test_topics_and_data_survive(broker, topic_name, how):
    rd_create_topic(broker.bootstrap, topic_name, PARTITIONS, config={"retention.ms": "86400000"})
    other = f"{topic_name}-auto"
    msgs = sample_messages(300, PARTITIONS)
    acked = produce_acked(broker.bootstrap, topic_name, msgs)
    for p, offsets in acked.items():
        assert offsets == list(range(len(offsets))), f"acked offsets of partition {p}"
    # An auto-created topic (first produce creates it) with data.
    produce_acked(broker.bootstrap, other, [Msg(b"k", b"auto-created", (), None, None)])
    before = watermarks(broker.bootstrap, topic_name, PARTITIONS)

    getattr(broker, how)()

    wait_for_topic(broker.bootstrap, topic_name, PARTITIONS)
    wait_for_topic(broker.bootstrap, other, 1)
    assert watermarks(broker.bootstrap, topic_name, PARTITIONS) == before
    assert_exact(msgs, rd_consume(broker.bootstrap, topic_name, range(PARTITIONS), len(msgs)))
    assert_exact(msgs, kp_consume(broker.bootstrap, topic_name, range(PARTITIONS), len(msgs)))
    got = rd_consume(broker.bootstrap, other, [0], 1)
    assert [(r.offset, r.value) for r in got] == [(0, b"auto-created")]

    # The topic's config came back too.
    assert rd_topic_configs(broker.bootstrap, topic_name)["retention.ms"] == "86400000"

    # New records continue at the old log end.
    more = sample_messages(30, PARTITIONS, t0=msgs[-1].timestamp + 1)
    acked = produce_acked(broker.bootstrap, topic_name, more)
    for p, offsets in acked.items():
        start = before[p][1]
        assert offsets == list(range(start, start + len(offsets))), f"offsets after {how} in partition {p}"
    assert_exact(msgs + more, rd_consume(broker.bootstrap, topic_name, range(PARTITIONS), len(msgs) + len(more)))


@pytest.mark.parametrize("acks", ["1", "all"])
def test_acked_records_survive_kill9_under_load(broker, topic_name, acks):
    """Kill -9 right after the last ack: acks=1 promises survival of a process crash, acks=all
    of power loss; either way every acknowledged record is there, in order, at its offset —
    across several kills, with appends in between."""
    rd_create_topic(broker.bootstrap, topic_name, PARTITIONS)
    everything: list[Msg] = []
    for round_ in range(3):
        msgs = [Msg(f"r{round_}-k{i % 5}".encode(), f"r{round_}-v{i}".encode() * (1 + i % 40), (),
                    1_700_000_000_000 + round_ * 10_000 + i, i % PARTITIONS) for i in range(2000)]
        acked = produce_acked(broker.bootstrap, topic_name, msgs, acks=acks)
        everything += msgs
        broker.kill9()
        want = {p: len([m for m in everything if m.partition == p]) for p in range(PARTITIONS)}
        for p, offsets in acked.items():
            assert offsets[-1] == want[p] - 1, f"round {round_}: acked offsets of partition {p}"
        assert watermarks(broker.bootstrap, topic_name, PARTITIONS) == [(0, want[p]) for p in range(PARTITIONS)]
    assert_exact(everything, rd_consume(broker.bootstrap, topic_name, range(PARTITIONS), len(everything),
                                        timeout=60))


def test_created_topic_survives_immediate_kill9(broker, topic_name):
    """CreateTopics answered OK means the topic is durable: kill -9 right after it."""
    rd_create_topic(broker.bootstrap, topic_name, 5, config={"retention.bytes": "1073741824"})
    broker.kill9()
    wait_for_topic(broker.bootstrap, topic_name, 5)
    assert rd_topic_configs(broker.bootstrap, topic_name)["retention.bytes"] == "1073741824"
    produce_acked(broker.bootstrap, topic_name, [Msg(None, b"x", (), None, 4)])
    assert [r.offset for r in rd_consume(broker.bootstrap, topic_name, [4], 1)] == [0]


def test_deleted_topic_stays_deleted_after_restart(broker, topic_name):
    rd_create_topic(broker.bootstrap, topic_name, 2)
    produce_acked(broker.bootstrap, topic_name, [Msg(None, b"old", (), None, 0)])
    admin = rd_admin(broker.bootstrap)
    admin.delete_topics([topic_name], operation_timeout=10, request_timeout=30)[topic_name].result(30)
    broker.restart()
    md = rd_admin(broker.bootstrap).list_topics(timeout=10)
    assert topic_name not in md.topics, f"deleted topic {topic_name} is back after restart"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_restart_after_shutdown_with_connected_clients(broker, topic_name, sig):
    """SIGTERM or SIGINT (Ctrl-C) while a consumer is parked in a long poll and a producer is connected: the broker
    still exits promptly and cleanly (stop() asserts exit code 0 within the deadline)."""
    rd_create_topic(broker.bootstrap, topic_name, 1)
    producer = rd_producer(broker.bootstrap, acks="all")
    rd_produce(producer, topic_name, [Msg(None, b"before", (), None, 0)])
    c = rd_consumer(broker.bootstrap, **{"fetch.wait.max.ms": 5000})
    try:
        c.assign([TopicPartition(topic_name, 0, 1)])
        assert c.poll(1.0) is None
        broker.stop(timeout=10, sig=sig)
    finally:
        c.close()
    broker.start()
    got = rd_consume(broker.bootstrap, topic_name, [0], 1)
    assert [(r.offset, r.value) for r in got] == [(0, b"before")]
