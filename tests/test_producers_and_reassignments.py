"""DescribeProducers (API 61) and Alter/ListPartitionReassignments (APIs 45, 46) through
kafka-python's KafkaAdminClient, against producers and metadata made by confluent-kafka.

DescribeProducers shows the idempotent producer that wrote to a partition, with the last
sequence it used; reassignments are answered as a node that keeps one replica of each
partition and never moves one between its cores can: the current replica is accepted,
anything else refused, nothing is ever in progress. Before, weir did not offer these APIs
("not supported by broker")."""

from __future__ import annotations

import time

import kafka
import kafka.errors

from clients import CLIENT_TIMEOUT_S, Msg, rd_admin, rd_create_topic, rd_produce, rd_producer


def kp_admin(bootstrap: str) -> kafka.KafkaAdminClient:
    return kafka.KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=int(CLIENT_TIMEOUT_S * 1000))


def test_describe_producers_shows_the_idempotent_producer(broker, topic_name):
    rd_create_topic(broker.bootstrap, topic_name, 2)
    before_ms = int(time.time() * 1000)
    p = rd_producer(broker.bootstrap, **{"enable.idempotence": True, "acks": "all"})
    for i in range(3):  # three flushes: at least three batches, sequences 0..11
        rd_produce(p, topic_name, [Msg(None, f"v{i}-{j}".encode(), partition=0) for j in range(4)])
    p.flush(10)
    # Partition 1 only gets a producer without idempotence: no producer state.
    rd_produce(rd_producer(broker.bootstrap), topic_name, [Msg(None, b"plain", partition=1)])

    admin = kp_admin(broker.bootstrap)
    try:
        tp0, tp1 = kafka.TopicPartition(topic_name, 0), kafka.TopicPartition(topic_name, 1)
        states = admin.describe_producers([tp0, tp1])
        [active] = states[tp0].active_producers
        assert active.producer_id >= 0 and active.producer_epoch == 0, active
        assert active.last_sequence == 11, f"12 records sent from sequence 0: {active}"
        assert before_ms - 1000 <= active.last_timestamp <= int(time.time() * 1000) + 1000, active
        assert (active.coordinator_epoch, active.current_transaction_start_offset) == (-1, -1)
        assert states[tp1].active_producers == [], states[tp1]
    finally:
        admin.close()


def test_partition_reassignments_on_one_node(broker, topic_name):
    rd_create_topic(broker.bootstrap, topic_name, 2)
    md = rd_admin(broker.bootstrap).list_topics(topic=topic_name, timeout=10)
    leader = md.topics[topic_name].partitions[0].leader
    others = sorted(set(md.brokers) - {leader})
    tp = kafka.TopicPartition(topic_name, 0)
    admin = kp_admin(broker.bootstrap)
    try:
        assert admin.list_partition_reassignments() == {}
        assert admin.alter_partition_reassignments({tp: [leader]}) == {tp: None}
        assert admin.alter_partition_reassignments({tp: [99]}) == {
            tp: kafka.errors.InvalidReplicationAssignmentError}
        assert admin.alter_partition_reassignments({tp: None}) == {
            tp: kafka.errors.NoReassignmentInProgressError}
        if others:  # listeners.per.core with more than one core: another broker id
            assert admin.alter_partition_reassignments({tp: [others[0]]}) == {
                tp: kafka.errors.InvalidReplicationAssignmentError}
            assert admin.alter_partition_reassignments({tp: [leader, others[0]]}) == {
                tp: kafka.errors.InvalidReplicationFactorError}
        assert admin.list_partition_reassignments([tp]) == {}
    finally:
        admin.close()
    after = rd_admin(broker.bootstrap).list_topics(topic=topic_name, timeout=10).topics[topic_name]
    assert after.partitions[0].leader == leader and list(after.partitions[0].replicas) == [leader]
