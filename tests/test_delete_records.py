"""DeleteRecords, DescribeCluster, DescribeLogDirs and ElectLeaders through Kafka's admin clients (confluent-kafka and
kafka-python): records below the new low watermark are gone for every consumer, the move is
durable (it survives a kill -9), -1 means the high watermark, and an offset past it gets
OFFSET_OUT_OF_RANGE. Before, weir did not offer either API ("not supported by broker")."""

from __future__ import annotations

import kafka
import pytest
from confluent_kafka import KafkaException, TopicPartition

from clients import (CLIENT_TIMEOUT_S, Msg, rd_admin, rd_consume, rd_consumer, rd_create_topic, rd_produce,
                     rd_producer, wait_for_topic)


def delete_below(bootstrap: str, topic: str, partition: int, offset: int):
    admin = rd_admin(bootstrap)
    [f] = admin.delete_records([TopicPartition(topic, partition, offset)],
                               request_timeout=CLIENT_TIMEOUT_S).values()
    return f.result(CLIENT_TIMEOUT_S)


def test_deleted_records_are_gone_and_stay_gone_after_kill9(broker, topic_name):
    b = broker.bootstrap
    rd_create_topic(b, topic_name, 2)
    p = rd_producer(b, acks="all")
    for i in range(10):  # ten batches
        rd_produce(p, topic_name, [Msg(None, f"v{i}".encode(), partition=0)])
    rd_produce(p, topic_name, [Msg(None, b"other", partition=1)])
    low = delete_below(b, topic_name, 0, 6)
    assert low.low_watermark == 6
    c = rd_consumer(b)
    try:
        assert c.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=10, cached=False) == (6, 10)
        assert c.get_watermark_offsets(TopicPartition(topic_name, 1), timeout=10, cached=False) == (0, 1)
    finally:
        c.close()
    got = rd_consume(b, topic_name, [0], 4)
    assert [r.value for r in got] == [f"v{i}".encode() for i in range(6, 10)]
    broker.kill9()  # and starts it again on the same data
    wait_for_topic(broker.bootstrap, topic_name, 2)
    got = rd_consume(broker.bootstrap, topic_name, [0], 4)
    assert [(r.offset, r.value) for r in got] == [(i, f"v{i}".encode()) for i in range(6, 10)]


def test_minus_one_is_the_high_watermark_and_past_it_is_out_of_range(broker, topic_name):
    b = broker.bootstrap
    rd_create_topic(b, topic_name, 1)
    rd_produce(rd_producer(b, acks="all"), topic_name, [Msg(None, f"v{i}".encode(), partition=0) for i in range(3)])
    with pytest.raises(KafkaException) as e:
        delete_below(b, topic_name, 0, 4)
    assert e.value.args[0].name() == "OFFSET_OUT_OF_RANGE"
    assert delete_below(b, topic_name, 0, -1).low_watermark == 3


def test_kafka_python_delete_records_and_describe_cluster(broker, topic_name):
    b = broker.bootstrap
    rd_create_topic(b, topic_name, 1)
    rd_produce(rd_producer(b, acks="all"), topic_name, [Msg(None, f"v{i}".encode(), partition=0) for i in range(5)])
    admin = kafka.KafkaAdminClient(bootstrap_servers=b, request_timeout_ms=int(CLIENT_TIMEOUT_S * 1000))
    try:
        tp = kafka.TopicPartition(topic_name, 0)
        result = admin.delete_records({tp: 2})
        assert result[tp]["low_watermark"] == 2, result
        cluster = admin.describe_cluster()
        assert cluster["cluster_id"] == "weir"
        md = rd_admin(b).list_topics(timeout=5)
        assert {x.get("broker_id", x.get("node_id")) for x in cluster["brokers"]} == set(md.brokers), (cluster, md.brokers)
    finally:
        admin.close()


def test_confluent_describe_cluster_lists_the_metadata_brokers(broker):
    admin = rd_admin(broker.bootstrap)
    d = admin.describe_cluster(request_timeout=CLIENT_TIMEOUT_S).result(CLIENT_TIMEOUT_S)
    md = admin.list_topics(timeout=5)
    assert d.cluster_id == "weir"
    assert {n.id for n in d.nodes} == set(md.brokers)
    assert {(n.host, n.port) for n in d.nodes} == {(m.host, m.port) for m in md.brokers.values()}


def test_describe_log_dirs_reports_each_partition_once_with_its_size(broker, topic_name):
    """kafka-python asks every broker of the Metadata (one per core): each partition is
    reported by exactly one of them, with the bytes it holds."""
    b = broker.bootstrap
    rd_create_topic(b, topic_name, 4)
    rd_produce(rd_producer(b, acks="all"), topic_name,
               [Msg(None, b"x" * 1000, partition=p) for p in range(4) for _ in range(p + 1)])
    admin = kafka.KafkaAdminClient(bootstrap_servers=b, request_timeout_ms=int(CLIENT_TIMEOUT_S * 1000))
    try:
        dirs = admin.describe_log_dirs(topic_partitions=[topic_name])
    finally:
        admin.close()
    sizes: dict[int, int] = {}
    brokers = set()
    for broker_result in dirs:
        brokers.add(broker_result["broker"])
        for log_dir in broker_result["log_dirs"]:
            assert log_dir["error_code"] == 0, broker_result
            for t in log_dir["topics"]:
                assert t["name"] == topic_name, t
                for p in t["partitions"]:
                    assert p["partition_index"] not in sizes, f"partition {p['partition_index']} reported twice"
                    sizes[p["partition_index"]] = p["partition_size"]
    assert brokers == set(rd_admin(b).list_topics(timeout=5).brokers), brokers
    assert sorted(sizes) == [0, 1, 2, 3], (sizes, dirs)
    assert sizes[3] > sizes[0] > 0, sizes


def test_elect_leaders_is_not_needed_on_a_single_node(broker, topic_name):
    from confluent_kafka import ElectionType
    b = broker.bootstrap
    rd_create_topic(b, topic_name, 2)
    admin = rd_admin(b)
    f = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)])
    result = f.result(CLIENT_TIMEOUT_S)
    for tp, err in result.items():
        assert err is not None and err.name() == "ELECTION_NOT_NEEDED", (tp, err)
