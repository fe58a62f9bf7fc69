"""Burrow, LinkedIn's consumer-lag monitor, reports a group's lag from weir correctly.

Burrow learns committed offsets only by consuming `__consumer_offsets` in Kafka's binary format,
and log ends with ListOffsets v0. Before weir served the topic as Kafka writes it, Burrow stopped
at "failed to get partition count ... __consumer_offsets" on a single broker, and read nothing
it understood in a cluster. Debian's Burrow 1.2.1 is the one run here (the Go module proxy does
not serve Burrow; tests/burrow_support.py says what it sends and why this kafka-version).

Each case: 100 records in each of 3 partitions, a group commits 67/67/66 — Burrow must report
those commits, the log ends 100/100/100 and a total lag of 100; then the group commits more
while Burrow runs, and Burrow follows (total lag 10).
"""

from __future__ import annotations

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import NewTopic

from burrow_support import Burrow, committed, current_lag, ensure_burrow
from clients import Msg, rd_admin, rd_consumer, rd_produce, rd_producer, wait_for_topic
from test_consumer_offsets_topic import cluster  # noqa: F401  (three brokers)


@pytest.fixture(scope="module")
def burrow_bin() -> str:
    return ensure_burrow()


def produce_and_commit(bootstrap: str, topic: str, group: str, partitions: int, replication: int):
    admin = rd_admin(bootstrap)
    admin.create_topics([NewTopic(topic, partitions, replication)])[topic].result(30)
    wait_for_topic(bootstrap, topic, partitions, timeout=30)
    rd_produce(rd_producer(bootstrap), topic, [Msg(None, b"r%d" % i, partition=p)
                                               for p in range(partitions) for i in range(100)])
    commit(bootstrap, topic, group, {0: 67, 1: 67, 2: 66})


def commit(bootstrap: str, topic: str, group: str, offsets: dict[int, int]) -> None:
    c = rd_consumer(bootstrap, **{"group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
        got = c.committed([TopicPartition(topic, p) for p in offsets], timeout=15)
        assert {tp.partition: tp.offset for tp in got} == offsets
    finally:
        c.close()


def check_burrow_reports_the_lag(bootstrap: str, workdir, topic: str, group: str) -> None:
    produce_and_commit(bootstrap, topic, group, 3, 3 if "," in bootstrap else 1)
    # Started after the topic exists (Burrow drops commits to topics it has not listed yet).
    with Burrow(bootstrap=bootstrap, workdir=workdir) as burrow:
        body = burrow.wait_for_group(group, timeout=90,
                                     until=lambda b: len(committed(b)) == 3 and b["status"]["totallag"] == 100)
        assert committed(body) == {(topic, 0): 67, (topic, 1): 67, (topic, 2): 66}, body
        assert current_lag(body) == {(topic, 0): 33, (topic, 1): 33, (topic, 2): 34}, body
        assert burrow.topic_offsets(topic) == [100, 100, 100]

        commit(bootstrap, topic, group, {0: 100, 1: 95, 2: 95})
        body = burrow.wait_for_group(group, timeout=30, until=lambda b: b["status"]["totallag"] == 10)
        assert committed(body) == {(topic, 0): 100, (topic, 1): 95, (topic, 2): 95}, body


def test_burrow_reports_a_groups_lag_from_a_standalone_broker(burrow_bin, broker, topic_name):
    check_burrow_reports_the_lag(broker.bootstrap, broker.workdir / "burrow", topic_name, f"{topic_name}-g")


def test_burrow_reports_a_groups_lag_from_a_cluster(burrow_bin, cluster, topic_name):
    bootstrap = ",".join(b.bootstrap for b in cluster)
    check_burrow_reports_the_lag(bootstrap, cluster[0].workdir / "burrow", topic_name, f"{topic_name}-g")
