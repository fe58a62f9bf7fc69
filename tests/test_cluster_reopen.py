"""A replica that fails to open is tried again while the broker runs.

Before, a replicated partition whose Raft group could not start on a broker (its `raft_state`
unreadable, say) stayed without a replica there until the broker was restarted: that broker
never caught up on the partition, and the partition ran one replica short even after the
cause was gone. Now each core tries what failed to open again (after 1 s, then doubling up to
60 s: `Shard::reopen_failed`), so a fixed cause heals without a restart.

Here, on three brokers: a follower is stopped, its replica's `raft_state` set aside and a
directory put in its place, so its replica cannot start; records are produced (acks=all:
committed by the other two); the file is put back while the broker runs. The replica then
opens, catches up, and holds the same batches as the other two.
"""

from __future__ import annotations

import time

import pytest

from clients import rd_producer
from test_cluster_metadata import NODE_ID_STRIDE, cluster, create, wait_until  # noqa: F401
from test_cluster_replication import leader_of, produce, read_all, same_batches_everywhere, values


@pytest.mark.timeout(240)
def test_a_replica_that_failed_to_open_opens_once_its_cause_is_gone(cluster):
    topic = "reopen"
    create(cluster[0].bootstrap, topic, 1, replication_factor=3)
    node, _ = leader_of(cluster, topic, 0)
    everyone = ",".join(b.bootstrap for b in cluster)
    producer = rd_producer(everyone, acks="all")
    produce(producer, topic, 0, 0, 100)
    same_batches_everywhere(cluster, topic, 0, 100)

    follower = next(b for b in cluster if int(b.settings["node.id"]) != node // NODE_ID_STRIDE)
    follower.stop()
    state = follower.data_dir / f"{topic}-0" / "raft_state"
    aside = state.with_name("raft_state.aside")
    state.rename(aside)
    state.mkdir()
    follower.start()
    wait_until("the follower's replica failed to open", lambda: "cannot start the partition's Raft group"
               in follower.log_path.read_text(errors="replace"), timeout=30)

    # The other two go on: committed without the follower.
    others = ",".join(b.bootstrap for b in cluster if b is not follower)
    produce(producer, topic, 0, 100, 200)
    time.sleep(2)  # a retry or two fail meanwhile
    assert "every partition that failed to open is open now" not in follower.log_path.read_text(errors="replace")

    state.rmdir()
    aside.rename(state)
    t0 = time.monotonic()
    same_batches_everywhere(cluster, topic, 0, 200)
    print(f"the replica opened and caught up {time.monotonic() - t0:.1f}s after its raft_state came back")
    assert "every partition that failed to open is open now" in follower.log_path.read_text(errors="replace")
    assert read_all(others, topic, 0, 200) == values(0, 0, 200)
    producer.flush(5)
    for b in cluster:
        b.check_alive()
