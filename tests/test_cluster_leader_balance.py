"""Preferred leaders in a cluster (docs/replication.md, "Preferred leaders"; issue 19).

What was wrong before: raft-rs elects whichever replica times out first, so a new topic's
leaders landed anywhere (now and then all on one broker: the cluster transaction test and
the RF 3 benchmark re-created topics until they did not), and after a broker restarted it led
nothing until other failures moved leaders to it — one broker did all the leaders' work.

Three `weir serve` processes with `auto.leader.rebalance.enable=true` (the default) and
`leader.imbalance.check.interval.seconds=1`:
- a new RF 3 topic of three partitions is led by each partition's preferred replica (the first
  of its placement), one per broker;
- acks=all records go to all three partitions; the broker leading partition 0 is killed -9, its
  partition gets another leader, more records are written; the broker is restarted, and once it
  has caught up its partition's leadership comes back to it (Kafka's automatic
  preferred-leader election), with no acknowledged record lost or moved.
"""

from __future__ import annotations

import time

import pytest

from clients import rd_consume, rd_producer
from test_cluster_metadata import NODE_ID_STRIDE, applied, cluster, create, wait_until  # noqa: F401
from test_cluster_replication import leader_of, produce, values

TOPIC = "balanced"


def leaders_and_preferred(b, partitions: int):
    """[(leader broker, preferred broker, leader epoch)] from the broker's applied metadata,
    once every partition has been led."""
    t = applied(b)["topics"].get(TOPIC)
    if t is None:
        return None
    epochs = t.get("leader_epochs", [])
    if len(epochs) < partitions or min(epochs) < 1:
        return None
    return [(t["brokers"][p], t["replicas"][p][0][0], epochs[p]) for p in range(partitions)]


def all_preferred(brokers, partitions: int):
    """Every live broker's applied metadata names the preferred replica as every partition's
    leader."""
    seen = [leaders_and_preferred(b, partitions) for b in brokers]
    if any(s is None for s in seen) or any(s != seen[0] for s in seen):
        return None
    return seen[0] if all(leader == preferred for leader, preferred, _ in seen[0]) else None


@pytest.mark.timeout(180)
@pytest.mark.parametrize("cluster", [{"auto.leader.rebalance.enable": "true",
                                      "leader.imbalance.check.interval.seconds": "1"}], indirect=True)
def test_leaders_are_the_preferred_replicas_and_come_back_after_a_restart(cluster):
    everyone = ",".join(b.bootstrap for b in cluster)
    create(cluster[0].bootstrap, TOPIC, 3, replication_factor=3)
    first = wait_until("every partition led by its preferred replica", lambda: all_preferred(cluster, 3),
                       timeout=30.0)
    assert sorted(leader for leader, _, _ in first) == [1, 2, 3], f"one leader per broker: {first}"

    producer = rd_producer(everyone, acks="all", **{"enable.idempotence": True})
    for p in range(3):
        produce(producer, TOPIC, p, 0, 100)

    # The leader of partition 0 dies: another replica leads it; writes go on.
    _, epoch0 = leader_of(cluster, TOPIC, 0)
    dead = cluster[first[0][0] - 1]
    survivors = [b for b in cluster if b is not dead]
    dead._kill()
    moved, _ = leader_of(survivors, TOPIC, 0, epoch0 + 1)
    assert moved // NODE_ID_STRIDE != first[0][0]
    producer = rd_producer(",".join(b.bootstrap for b in survivors), acks="all", **{"enable.idempotence": True})
    for p in range(3):
        produce(producer, TOPIC, p, 100, 200)

    # Restarted, it catches up and its partition's leadership comes back to it.
    dead.start()
    restarted = time.monotonic()
    back = wait_until("partition 0's leadership back on its preferred replica",
                      lambda: all_preferred(cluster, 3), timeout=60.0)
    took = time.monotonic() - restarted
    assert back[0][2] > epoch0 + 1, f"a new election moved it back: {back}"

    everyone = ",".join(b.bootstrap for b in cluster)
    producer = rd_producer(everyone, acks="all", **{"enable.idempotence": True})
    for p in range(3):
        produce(producer, TOPIC, p, 200, 250)
    for p in range(3):
        got = rd_consume(everyone, TOPIC, [p], 250)
        assert [r.offset for r in got] == list(range(250)), p
        assert [r.value for r in got] == values(p, 0, 250), p
    print(f"leaders {[(l, e) for l, _, e in first]} -> after the restart {[(l, e) for l, _, e in back]}; "
          f"back {took:.1f} s after the restart")
