"""CreatePartitions: a topic grows with Kafka's admin APIs (kafka-topics.sh --alter
--partitions, AdminClient.create_partitions), with confluent-kafka and kafka-python.

The new partitions are in Metadata with a leader at once, take records, keep them across a
restart, and a subscribed consumer group picks them up. Kafka's errors: a count that does not
grow (INVALID_PARTITIONS), an unknown topic, a bad assignment; validate_only changes nothing.
Before, weir did not offer CreatePartitions at all: clients said "not supported by broker"."""

from __future__ import annotations

import shutil
import time

import kafka
import kafka.admin
import pytest
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import NewPartitions

from clients import (CLIENT_TIMEOUT_S, Msg, rd_admin, rd_consume, rd_consumer, rd_create_topic, rd_produce,
                     rd_producer, wait_for_topic)


def grow(bootstrap: str, topic: str, count: int, assignments=None, validate_only: bool = False):
    admin = rd_admin(bootstrap)
    new = NewPartitions(topic, count) if assignments is None else \
        NewPartitions(topic, count, replica_assignment=assignments)
    [f] = admin.create_partitions([new],
                                  validate_only=validate_only, request_timeout=CLIENT_TIMEOUT_S).values()
    return f.result(CLIENT_TIMEOUT_S)


def error_of(fn) -> str:
    with pytest.raises(KafkaException) as e:
        fn()
    return e.value.args[0].name()


def test_partitions_added_take_records_and_survive_a_restart(broker, topic_name):
    b = broker.bootstrap
    rd_create_topic(b, topic_name, 2)
    grow(b, topic_name, 5)
    wait_for_topic(b, topic_name, 5)
    md = rd_admin(b).list_topics(topic=topic_name, timeout=5)
    brokers = set(md.brokers)
    assert all(p.leader in brokers for p in md.topics[topic_name].partitions.values())
    p = rd_producer(b, acks="all")
    rd_produce(p, topic_name, [Msg(None, f"v{i}".encode(), partition=i) for i in range(5)])
    got = rd_consume(b, topic_name, range(5), 5)
    assert sorted((r.partition, r.value) for r in got) == [(i, f"v{i}".encode()) for i in range(5)]
    broker.restart()
    wait_for_topic(broker.bootstrap, topic_name, 5)
    got = rd_consume(broker.bootstrap, topic_name, range(5), 5)
    assert sorted((r.partition, r.value) for r in got) == [(i, f"v{i}".encode()) for i in range(5)]


def test_bad_requests_get_kafka_errors_and_change_nothing(broker, topic_name):
    b = broker.bootstrap
    rd_create_topic(b, topic_name, 3)
    assert error_of(lambda: grow(b, topic_name, 3)) == "INVALID_PARTITIONS"
    assert error_of(lambda: grow(b, topic_name, 2)) == "INVALID_PARTITIONS"
    assert error_of(lambda: grow(b, "no-such-topic-" + topic_name, 4)) == "UNKNOWN_TOPIC_OR_PART"
    assert error_of(lambda: grow(b, topic_name, 4, assignments=[[0, 1]])) == "INVALID_REPLICA_ASSIGNMENT"
    assert error_of(lambda: grow(b, topic_name, 4, assignments=[[77]])) == "INVALID_REPLICA_ASSIGNMENT"
    grow(b, topic_name, 8, validate_only=True)
    md = rd_admin(b).list_topics(topic=topic_name, timeout=5)
    assert len(md.topics[topic_name].partitions) == 3, "validate_only or a refused request changed the topic"


def test_assignment_places_the_new_partition_on_the_named_broker(broker, topic_name):
    """With one broker per core, an assignment names the core that leads the new partition."""
    b = broker.bootstrap
    rd_create_topic(b, topic_name, 1)
    md = rd_admin(b).list_topics(topic=topic_name, timeout=5)
    target = max(md.brokers)
    grow(b, topic_name, 2, assignments=[[target]])
    wait_for_topic(b, topic_name, 2)
    md = rd_admin(b).list_topics(topic=topic_name, timeout=5)
    assert md.topics[topic_name].partitions[1].leader == target


def test_kafka_python_create_partitions(broker, topic_name):
    b = broker.bootstrap
    rd_create_topic(b, topic_name, 1)
    admin = kafka.KafkaAdminClient(bootstrap_servers=b, request_timeout_ms=int(CLIENT_TIMEOUT_S * 1000))
    try:
        admin.create_partitions({topic_name: kafka.admin.NewPartitions(total_count=4)})
        with pytest.raises(kafka.errors.InvalidPartitionsError):
            admin.create_partitions({topic_name: kafka.admin.NewPartitions(total_count=4)})
    finally:
        admin.close()
    wait_for_topic(b, topic_name, 4)


def test_a_subscribed_group_picks_up_new_partitions(broker, topic_name):
    b = broker.bootstrap
    rd_create_topic(b, topic_name, 1)
    c = rd_consumer(b, **{"group.id": f"g-{topic_name}", "auto.offset.reset": "earliest",
                          "topic.metadata.refresh.interval.ms": 500})
    try:
        c.subscribe([topic_name])
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while not c.assignment() and time.monotonic() < deadline:
            c.poll(0.2)
        assert {tp.partition for tp in c.assignment()} == {0}
        grow(b, topic_name, 3)
        rd_produce(rd_producer(b, acks="all"), topic_name, [Msg(None, b"new", partition=2)])
        got = None
        while got is None and time.monotonic() < deadline + CLIENT_TIMEOUT_S:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got = m
        assert got is not None and got.partition() == 2 and got.value() == b"new"
        assert {tp.partition for tp in c.assignment()} == {0, 1, 2}
    finally:
        c.close()


def test_growth_whose_log_cannot_be_made_is_undone_and_no_stale_log_is_reused(broker, topic_name):
    """A new partition whose log cannot be created (an operator's file sits where its
    directory goes) fails the CreatePartitions with KAFKA_STORAGE_ERROR and the cause, and the
    topic keeps its partitions, as on CreateTopics. A directory left at a new partition's name
    (an earlier life of the topic) is removed, not taken as the new partition's data."""
    b = broker.bootstrap
    rd_create_topic(b, topic_name, 2)
    rd_produce(rd_producer(b, acks="all"), topic_name,
               [Msg(None, f"v{i}".encode(), partition=i) for i in range(2)])
    blocker = broker.data_dir / f"{topic_name}-2"
    blocker.write_text("not a directory")
    with pytest.raises(KafkaException) as e:
        grow(b, topic_name, 3)
    err = e.value.args[0]
    assert err.name() == "KAFKA_STORAGE_ERROR", err
    assert "partition 2" in err.str(), err.str()
    md = rd_admin(b).list_topics(topic=topic_name, timeout=5)
    assert len(md.topics[topic_name].partitions) == 2, "the failed growth was not undone"
    assert blocker.read_text() == "not a directory", "the operator's file was touched"

    # A stale log at the new partition's name: a copy of partition 0's (one record).
    blocker.unlink()
    shutil.copytree(broker.data_dir / f"{topic_name}-0", blocker)
    grow(b, topic_name, 3)
    wait_for_topic(b, topic_name, 3)
    c = rd_consumer(b)
    try:
        assert c.get_watermark_offsets(TopicPartition(topic_name, 2), timeout=10) == (0, 0), \
            "the new partition took the stale log's records"
        assert c.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=10) == (0, 1)
    finally:
        c.close()
