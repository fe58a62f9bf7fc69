"""Topic administration: CreateTopics, DeleteTopics, Metadata, DescribeConfigs, auto-creation —
through confluent-kafka's AdminClient and kafka-python's KafkaAdminClient."""

from __future__ import annotations

import time

import kafka
import kafka.errors
import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import NewTopic
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType as KpConfigResourceType

from clients import (Msg, assert_exact, rd_admin, rd_consume, rd_create_topic, rd_produce, rd_producer,
                     rd_topic_configs, sample_messages, wait_for_topic)


def kp_admin(bootstrap):
    return kafka.KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=20000)


def test_librdkafka_create_list_delete(broker, topic_name):
    admin = rd_admin(broker.bootstrap)
    names = [f"{topic_name}-{i}" for i in range(3)]
    fs = admin.create_topics([NewTopic(n, num_partitions=i + 1, replication_factor=1) for i, n in enumerate(names)],
                             operation_timeout=10, request_timeout=30)
    for n, f in fs.items():
        assert f.result(30) is None, n
    for i, n in enumerate(names):
        wait_for_topic(broker.bootstrap, n, i + 1)

    md = admin.list_topics(timeout=10)
    assert set(names) <= set(md.topics), f"Metadata lists {sorted(md.topics)}"
    # listeners.per.core (the default): one broker per core, each on its own port of the
    # address the broker listens on (tests/test_per_core_listeners.py has the details).
    assert len(md.brokers) >= 1
    for b in md.brokers.values():
        assert b.host == "127.0.0.1", "the broker advertises the address it listens on"
    assert len({b.port for b in md.brokers.values()}) == len(md.brokers)
    for i, n in enumerate(names):
        t = md.topics[n]
        assert t.error is None
        assert sorted(t.partitions) == list(range(i + 1))
        for p in t.partitions.values():
            assert p.leader in md.brokers and list(p.replicas) == [p.leader] and list(p.isrs) == [p.leader]

    # Creating an existing topic fails with TOPIC_ALREADY_EXISTS.
    f = admin.create_topics([NewTopic(names[0], num_partitions=1, replication_factor=1)],
                            request_timeout=30)[names[0]]
    with pytest.raises(KafkaException) as e:
        f.result(30)
    assert e.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS

    # validate_only creates nothing.
    ghost = f"{topic_name}-validate-only"
    admin.create_topics([NewTopic(ghost, num_partitions=2, replication_factor=1)], validate_only=True,
                        request_timeout=30)[ghost].result(30)
    assert ghost not in admin.list_topics(timeout=10).topics

    fs = admin.delete_topics(names[:2], operation_timeout=10, request_timeout=30)
    for n, f in fs.items():
        assert f.result(30) is None, n
    deadline = time.monotonic() + 10
    while True:
        left = set(admin.list_topics(timeout=10).topics) & set(names)
        if left == {names[2]}:
            break
        assert time.monotonic() < deadline, f"after DeleteTopics Metadata still lists {left}"
        time.sleep(0.1)

    # Deleting a topic that does not exist: UNKNOWN_TOPIC_OR_PART.
    f = admin.delete_topics([f"{topic_name}-never"], request_timeout=30)[f"{topic_name}-never"]
    with pytest.raises(KafkaException) as e:
        f.result(30)
    assert e.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_deleted_topic_recreated_is_empty(broker, topic_name):
    rd_create_topic(broker.bootstrap, topic_name, 1)
    rd_produce(rd_producer(broker.bootstrap, acks="all"), topic_name, [Msg(None, b"old", (), None, 0)] * 5)
    admin = rd_admin(broker.bootstrap)
    admin.delete_topics([topic_name], operation_timeout=10, request_timeout=30)[topic_name].result(30)
    deadline = time.monotonic() + 10
    while topic_name in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, "deleted topic still listed"
        time.sleep(0.1)
    rd_create_topic(broker.bootstrap, topic_name, 2)
    rd_produce(rd_producer(broker.bootstrap, acks="all"), topic_name, [Msg(None, b"new", (), None, 0)])
    got = rd_consume(broker.bootstrap, topic_name, [0, 1], 1)
    assert [(r.partition, r.offset, r.value) for r in got] == [(0, 0, b"new")]


def test_kafka_python_admin(broker, topic_name):
    admin = kp_admin(broker.bootstrap)
    try:
        names = [f"{topic_name}-{i}" for i in range(2)]
        admin.create_topics({n: {"num_partitions": 2 + i, "replication_factor": 1,
                                 "configs": {"retention.ms": str(3_600_000 * (i + 1))}}
                             for i, n in enumerate(names)}, timeout_ms=20000)
        for i, n in enumerate(names):
            wait_for_topic(broker.bootstrap, n, 2 + i)
        assert set(names) <= set(admin.list_topics())

        described = {t["name"]: t for t in admin.describe_topics(names)}
        for i, n in enumerate(names):
            assert described[n]["error_code"] == 0
            assert sorted(p["partition_index"] for p in described[n]["partitions"]) == list(range(2 + i))

        # Default filter: only configs set on the topic (config source DYNAMIC_TOPIC_CONFIG).
        configs = admin.describe_configs([KpConfigResource(KpConfigResourceType.TOPIC, names[1])])
        topic_configs = configs["topic"][names[1]]
        assert topic_configs.get("retention.ms", {}).get("value") == "7200000", f"DescribeConfigs: {topic_configs}"

        with pytest.raises(kafka.errors.TopicAlreadyExistsError):
            admin.create_topics({names[0]: {"num_partitions": 1, "replication_factor": 1}}, timeout_ms=20000)

        admin.delete_topics(names, timeout_ms=20000)
        deadline = time.monotonic() + 10
        while set(names) & set(admin.list_topics()):
            assert time.monotonic() < deadline, "kafka-python: deleted topics still listed"
            time.sleep(0.1)
    finally:
        admin.close()


def test_describe_configs_returns_topic_configs(broker, topic_name):
    rd_create_topic(broker.bootstrap, topic_name, 1, config={"retention.ms": "3600000", "segment.bytes": "16777216"})
    configs = rd_topic_configs(broker.bootstrap, topic_name)
    assert configs.get("retention.ms") == "3600000", configs
    assert configs.get("segment.bytes") == "16777216", configs
    # Topics without overrides still report the effective values of Kafka's topic settings.
    other = f"{topic_name}-defaults"
    rd_create_topic(broker.bootstrap, other, 1)
    configs = rd_topic_configs(broker.bootstrap, other)
    for name in ("retention.ms", "retention.bytes", "segment.bytes"):
        assert name in configs and configs[name] not in (None, ""), f"{name} missing from {configs}"
    assert int(configs["segment.bytes"]) > 0


def test_auto_create_uses_num_partitions(broker_factory, topic_name):
    """Producing to an unknown topic creates it with num.partitions partitions."""
    b1 = broker_factory()
    rd_produce(rd_producer(b1.bootstrap, acks="all"), topic_name, [Msg(b"k", b"v", (), None, None)])
    wait_for_topic(b1.bootstrap, topic_name, 1)

    b4 = broker_factory(settings={"num.partitions": 4})
    rd_produce(rd_producer(b4.bootstrap, acks="all"), topic_name,
               [Msg(f"k{i}".encode(), b"v", (), None, None) for i in range(40)])
    wait_for_topic(b4.bootstrap, topic_name, 4)
    got = rd_consume(b4.bootstrap, topic_name, range(4), 40)
    assert len({r.partition for r in got}) > 1


def test_auto_create_can_be_disabled(broker_factory, topic_name):
    b = broker_factory(settings={"auto.create.topics.enable": "false"})
    md = rd_admin(b.bootstrap).list_topics(topic=topic_name, timeout=10)
    t = md.topics.get(topic_name)
    assert t is None or t.error is not None and t.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART, t
    assert topic_name not in rd_admin(b.bootstrap).list_topics(timeout=10).topics


def test_create_topic_whose_log_cannot_be_made_fails_cleanly(broker, topic_name):
    """A partition log that cannot be created (here an operator's file sits where its directory
    goes) fails the CreateTopics with KAFKA_STORAGE_ERROR and the cause; no half-made topic is
    left behind, and the same create works once the obstacle is gone."""
    blocker = broker.data_dir / f"{topic_name}-1"
    blocker.write_text("not a directory")
    admin = rd_admin(broker.bootstrap)
    fs = admin.create_topics([NewTopic(topic_name, num_partitions=3, replication_factor=1)],
                             operation_timeout=10, request_timeout=30)
    with pytest.raises(KafkaException) as e:
        fs[topic_name].result(30)
    err = e.value.args[0]
    assert err.code() == KafkaError.KAFKA_STORAGE_ERROR, err
    assert "partition 1" in err.str(), err.str()
    assert topic_name not in admin.list_topics(timeout=10).topics
    assert not (broker.data_dir / f"{topic_name}-0").exists(), "partition 0's log was left behind"
    assert blocker.read_text() == "not a directory", "the operator's file was touched"

    blocker.unlink()
    rd_create_topic(broker.bootstrap, topic_name, 3)
    msgs = sample_messages(30, 3)
    rd_produce(rd_producer(broker.bootstrap), topic_name, msgs)
    assert_exact(msgs, rd_consume(broker.bootstrap, topic_name, [0, 1, 2], 30))
