"""Explicit replica assignments in a cluster (docs/replication.md, "Explicit replica
assignments"): CreateTopics and CreatePartitions place each partition's replicas where the
request says, the first named being the preferred leader, as `kafka-topics.sh
--replica-assignment` and the AdminClients' `replica_assignment` ask of Kafka.

Before, a cluster refused CreatePartitions with an assignment (INVALID_REPLICA_ASSIGNMENT,
"not supported in a cluster yet") and CreateTopics took the assignment's partition count but
made every partition a single replica placed by load, whatever brokers it named — a user who
asked for three copies got one. librdkafka's own 0081_admin test stopped there.

What a user would notice, and what this checks: the replicas Metadata lists are the brokers
named, in the order named (a node id names a broker, or one of its cores with per-core
listeners); the first named leads; the records are replicated there (acks=all, read back); and
an assignment that cannot be placed — a broker named twice, an unknown broker, lists of
different lengths, a list of the wrong length for the topic — is refused with
INVALID_REPLICA_ASSIGNMENT and changes nothing.
"""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import NewPartitions, NewTopic

from clients import CLIENT_TIMEOUT_S, rd_admin, rd_producer
from test_cluster_metadata import NODE_ID_STRIDE, cluster, metadata_v1, wait_until  # noqa: F401
from test_cluster_replication import leader_of, produce, read_all, values


def replicas_everywhere(brokers, topic: str, partitions: int) -> dict[int, list[int]]:
    """{partition: replica node ids}, once every broker's Metadata lists the same."""
    def check():
        seen = []
        for b in brokers:
            _, topics = metadata_v1(b.bootstrap, [topic], full=True)
            err, parts = topics[topic]
            if err != 0 or len(parts) != partitions:
                return None
            seen.append({p: list(r[1]) for p, r in parts.items()})
        return seen[0] if all(s == seen[0] for s in seen) else None
    return wait_until(f"{topic}'s replicas named everywhere", check)


def refused(future) -> KafkaError:
    with pytest.raises(KafkaException) as e:
        future.result(CLIENT_TIMEOUT_S)
    return e.value.args[0]


@pytest.mark.timeout(240)
def test_replicas_go_where_the_request_says(cluster):
    admin = rd_admin(cluster[0].bootstrap)
    everyone = ",".join(b.bootstrap for b in cluster)
    topic = "assigned"
    # Brokers by id, in a different order per partition; the last names cores: core 1 of
    # broker 2, core 0 of broker 1, core 1 of broker 3.
    want = [[2, 3, 1], [3, 1, 2], [2 * NODE_ID_STRIDE + 1, NODE_ID_STRIDE, 3 * NODE_ID_STRIDE + 1]]
    admin.create_topics([NewTopic(topic, len(want), replica_assignment=want)])[topic].result(CLIENT_TIMEOUT_S)
    got = replicas_everywhere(cluster, topic, 3)
    print(f"asked {want}, Metadata lists {got}")
    for p, nodes in enumerate(want):
        assert [n // NODE_ID_STRIDE for n in got[p]] == [n if n < NODE_ID_STRIDE else n // NODE_ID_STRIDE
                                                       for n in nodes], p
    assert got[2] == want[2], "a node id of a core names that core"
    # The first replica named is the preferred leader: it leads once the group has settled.
    for p, nodes in enumerate(want):
        first = nodes[0] if nodes[0] < NODE_ID_STRIDE else nodes[0] // NODE_ID_STRIDE
        wait_until(f"{topic}-{p} led by broker {first}",
                   lambda: leader_of(cluster, topic, p)[0] // NODE_ID_STRIDE == first, timeout=30)
    producer = rd_producer(everyone, acks="all")
    for p in range(3):
        produce(producer, topic, p, 0, 20)
        assert read_all(everyone, topic, p, 20) == values(p, 0, 20)

    # Two more partitions, placed as asked (the topic has three replicas per partition).
    grow = [[1, 3, 2], [3, 2, 1]]
    admin.create_partitions([NewPartitions(topic, 5, replica_assignment=grow)])[topic].result(CLIENT_TIMEOUT_S)
    got = replicas_everywhere(cluster, topic, 5)
    assert [[n // NODE_ID_STRIDE for n in got[p]] for p in (3, 4)] == grow
    producer.flush(5)
    producer = rd_producer(everyone, acks="all")  # one that knows the new partitions
    for p in (3, 4):
        leader_of(cluster, topic, p)
        produce(producer, topic, p, 0, 10)
        assert read_all(everyone, topic, p, 10) == values(p, 0, 10)
    producer.flush(5)


@pytest.mark.timeout(240)
def test_assignments_that_cannot_be_placed_are_refused(cluster):
    admin = rd_admin(cluster[0].bootstrap)
    bad_topics = {
        "twice": [[1, 1, 2]],
        "unknown": [[1, 2, 9]],
        "uneven": [[1, 2], [2]],
        "unknown-core": [[NODE_ID_STRIDE + 7]],
    }
    for name, assignment in bad_topics.items():
        err = refused(admin.create_topics([NewTopic(name, len(assignment), replica_assignment=assignment)])[name])
        assert err.code() == KafkaError.INVALID_REPLICA_ASSIGNMENT, (name, err)
        print(f"CreateTopics {assignment}: {err.str()}")
    _, topics = metadata_v1(cluster[0].bootstrap)  # all topics (naming them would create them)
    assert not set(bad_topics) & set(topics), "no refused topic was created"

    admin.create_topics([NewTopic("pair", num_partitions=1, replication_factor=2)])["pair"].result(CLIENT_TIMEOUT_S)
    replicas_everywhere(cluster, "pair", 1)
    for assignment in ([[1, 2, 3]], [[1]], [[1, 2], [2, 3]], [[2, 2]]):
        err = refused(admin.create_partitions([NewPartitions("pair", 2, replica_assignment=assignment)])["pair"])
        assert err.code() == KafkaError.INVALID_REPLICA_ASSIGNMENT, (assignment, err)
        print(f"CreatePartitions {assignment} on a topic of 2 replicas: {err.str()}")
    assert len(replicas_everywhere(cluster, "pair", 1)) == 1, "the topic did not grow"
    admin.create_partitions([NewPartitions("pair", 2, replica_assignment=[[3, 1]])])["pair"].result(CLIENT_TIMEOUT_S)
    assert [n // NODE_ID_STRIDE for n in replicas_everywhere(cluster, "pair", 2)[1]] == [3, 1]
