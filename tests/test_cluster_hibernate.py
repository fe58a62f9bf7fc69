"""Idle partition groups hibernate, and wake for what needs them (docs/replication.md,
"Hibernating partition groups"; issue 19: heartbeats of thousands of groups).

Before, every replica of every replicated partition ticked every 100 ms and its leader sent a
heartbeat to each follower every 200 ms: an idle cluster of three brokers with 1,000
partitions at RF 3 spent 13.7 % of a core per broker doing nothing (benches/cluster_idle.py).
Now a group with nothing to replicate for a second sleeps on every replica, and wakes for a
produce, for any Raft message but a heartbeat answer, and when a broker holding one of its
replicas goes silent or comes back.

What a user would notice if this went wrong, and what these tests check:
- a produce to a sleeping partition must be acknowledged (acks=all) and read back, and the
  partition must go back to sleep afterwards (the gauge `weir_raft_groups_asleep`);
- a sleeping partition whose leader's broker is killed -9 must elect a new leader in seconds,
  as an awake one does: its followers hear no heartbeats either way, and only the peer's
  silence (`peer::liveness`) wakes them. Without that wake they would sleep on for 20 s
  (`QUIET_MAX`), which the test's 10 s bound catches.
"""

from __future__ import annotations

import re
import time
import urllib.request

import pytest

from clients import rd_producer
from test_cluster_metadata import NODE_ID_STRIDE, cluster, create, wait_until  # noqa: F401
from test_cluster_replication import leader_of, produce, read_all, same_batches_everywhere, values

# The longest a failover of a sleeping partition may take: peer silence (1 s) + an election
# timeout (1-2 s), with room for a loaded CI machine; a missed wake would take 20 s and more.
FAILOVER_S = 10.0


def groups(broker) -> tuple[int, int]:
    """(Raft groups, of them asleep) on the broker, summed over its cores."""
    with urllib.request.urlopen(broker.metrics_url, timeout=10) as r:
        text = r.read().decode()
    total = sum(int(float(v)) for v in re.findall(r"^weir_raft_groups\{[^}]*\} (\S+)$", text, re.M))
    asleep = sum(int(float(v)) for v in re.findall(r"^weir_raft_groups_asleep\{[^}]*\} (\S+)$", text, re.M))
    return total, asleep


def all_asleep(brokers, at_least: int) -> bool:
    counts = [groups(b) for b in brokers]
    return all(total >= at_least and asleep == total for total, asleep in counts) and counts


@pytest.mark.timeout(180)
def test_a_sleeping_partition_takes_a_produce_and_sleeps_again(cluster):
    topic = "sleepy"
    partitions = 6
    create(cluster[0].bootstrap, topic, partitions, replication_factor=3)
    for p in range(partitions):
        leader_of(cluster, topic, p)
    t0 = time.monotonic()
    counts = wait_until("every group asleep", lambda: all_asleep(cluster, partitions), timeout=30)
    print(f"every group asleep {time.monotonic() - t0:.1f}s after the leaders settled: {counts}")

    everyone = ",".join(b.bootstrap for b in cluster)
    producer = rd_producer(everyone, acks="all")
    t0 = time.monotonic()
    for p in range(partitions):
        produce(producer, topic, p, 0, 50)
    print(f"50 records acknowledged (acks=all) on each of {partitions} sleeping partitions in "
          f"{time.monotonic() - t0:.2f}s")
    for p in range(partitions):
        assert read_all(everyone, topic, p, 50) == values(p, 0, 50)

    # Once idle again, every group goes back to sleep (and the records stay readable).
    wait_until("every group asleep again", lambda: all_asleep(cluster, partitions), timeout=30)
    produce(producer, topic, 0, 50, 60)
    assert read_all(everyone, topic, 0, 60) == values(0, 0, 60)
    producer.flush(5)


@pytest.mark.timeout(180)
def test_a_sleeping_partition_elects_a_new_leader_when_its_leader_dies(cluster):
    topic = "asleep-when-killed"
    create(cluster[0].bootstrap, topic, 1, replication_factor=3)
    leader, epoch = leader_of(cluster, topic, 0)
    everyone = ",".join(b.bootstrap for b in cluster)
    producer = rd_producer(everyone, acks="all")
    produce(producer, topic, 0, 0, 20)
    wait_until("every group asleep", lambda: all_asleep(cluster, 1), timeout=30)

    dead = cluster[leader // NODE_ID_STRIDE - 1]
    survivors = [b for b in cluster if b is not dead]
    dead._kill()
    t_kill = time.monotonic()
    new_leader, new_epoch = leader_of(survivors, topic, 0, epoch + 1)
    took = time.monotonic() - t_kill
    print(f"leader of a sleeping {topic}-0 killed; node {new_leader} leads at epoch {new_epoch} "
          f"{took:.2f}s later")
    assert new_leader // NODE_ID_STRIDE != leader // NODE_ID_STRIDE
    assert took < FAILOVER_S, f"a sleeping partition took {took:.1f}s to elect a new leader"
    alive = ",".join(b.bootstrap for b in survivors)
    produce(producer, topic, 0, 20, 30)
    assert read_all(alive, topic, 0, 30) == values(0, 0, 30)

    # The killed broker comes back: its replica catches up (the sleeping leader and follower
    # wake when they hear from it again) and the partition sleeps again on all three.
    dead.start()
    same_batches_everywhere(cluster, topic, 0, 30)
    wait_until("every group asleep with the broker back",
               lambda: all_asleep(cluster, 1), timeout=60)
    producer.flush(5)
