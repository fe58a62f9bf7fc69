"""Partitions replicated across three `weir serve` processes (docs/replication.md, step 3; what
is built so far is in its "Step 3 as built" section).

Replication factor per topic: CreateTopics' `replication_factor` is accepted up to the number of
registered brokers (INVALID_REPLICATION_FACTOR above it), the replicas of each partition are on
distinct brokers and on the same core index of each (core-aligned: the brokers have equal core
counts), the placement is stored in the replicated metadata, and every broker's own Metadata
answer lists the same replicas for each partition, led by the first one. A topic of factor 1
keeps step 2's layout (no replica lists in the metadata file).

The three-broker fixture is test_cluster_metadata's; each broker's state is read where it lives
(its own raw Metadata v1 answer, its applied `weir-metadata.json`).
"""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import NewPartitions, NewTopic

from clients import CLIENT_TIMEOUT_S, rd_admin
from test_cluster_metadata import (CORES, NODE_ID_STRIDE, applied, cluster, create, metadata_v1,  # noqa: F401
                                   wait_until)


def replicas_everywhere(brokers, name: str, partitions: int) -> dict:
    """Waits until every broker answers Metadata for `name` with every partition led; returns
    broker 1's {partition: (leader, replicas, isr)} after checking the others say the same."""
    def check():
        answers = []
        for b in brokers:
            _, topics = metadata_v1(b.bootstrap, [name], full=True)
            err, parts = topics[name]
            if err != 0 or len(parts) != partitions or min(p[0] for p in parts.values()) < 0:
                return None
            answers.append(parts)
        assert all(a == answers[0] for a in answers), answers
        return answers[0]
    return wait_until(f"{name} replicas on every broker", check)


@pytest.mark.timeout(120)
def test_replication_factor_per_topic(cluster):
    b1, b2, b3 = cluster
    create(b2.bootstrap, "rf3", 4, replication_factor=3)
    parts = replicas_everywhere(cluster, "rf3", 4)
    leaders = set()
    for p, (leader, replicas, isr) in parts.items():
        assert len(replicas) == 3, (p, replicas)
        assert leader == replicas[0], (p, leader, replicas)
        assert sorted(r // NODE_ID_STRIDE for r in replicas) == [1, 2, 3], (p, replicas)
        assert len({r % NODE_ID_STRIDE for r in replicas}) == 1, f"not core-aligned: {replicas}"
        assert leader in isr, (p, isr)
        leaders.add(leader)
    assert len(leaders) == 4, f"preferred leaders not spread: {parts}"
    # The stored placement is the same on every broker and says factor 3.
    files = [applied(b)["topics"]["rf3"] for b in cluster]
    assert all(f == files[0] for f in files)
    assert [len(r) for r in files[0]["replicas"]] == [3] * 4

    # A factor above the registered brokers is refused, through any broker, and creates nothing.
    admin = rd_admin(b3.bootstrap)
    fs = admin.create_topics([NewTopic("rf4", num_partitions=1, replication_factor=4)],
                             request_timeout=CLIENT_TIMEOUT_S)
    with pytest.raises(KafkaException) as e:
        fs["rf4"].result(CLIENT_TIMEOUT_S)
    assert e.value.args[0].name() == "INVALID_REPLICATION_FACTOR", e.value
    assert all("rf4" not in applied(b)["topics"] for b in cluster)

    # Factor 1 keeps step 2's layout: one replica, no replica lists stored.
    create(b1.bootstrap, "rf1", 2)
    parts1 = replicas_everywhere(cluster, "rf1", 2)
    assert all(replicas == [leader] for leader, replicas, _ in parts1.values()), parts1
    assert "replicas" not in applied(b1)["topics"]["rf1"]

    # New partitions of a factor-3 topic get three replicas too.
    admin = rd_admin(b1.bootstrap)
    fs = admin.create_partitions(
        [NewPartitions("rf3", 6)], request_timeout=CLIENT_TIMEOUT_S)
    fs["rf3"].result(CLIENT_TIMEOUT_S)
    grown = replicas_everywhere(cluster, "rf3", 6)
    assert all(len(r) == 3 for _, r, _ in grown.values()), grown
