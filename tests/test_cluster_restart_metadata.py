"""A restarted broker's first Metadata answer is the cluster's, not what it knew before it went
down (docs/replication.md, "A restarted broker catches up before answering Metadata"; issue 19).

What broke before: a broker killed while it led a partition read its applied metadata back at
start-up and answered Metadata from it at once, naming itself the partition's leader (and not
knowing topics created while it was down). librdkafka then sent a ListOffsets there, got
NOT_LEADER_OR_FOLLOWER, which it does not retry, and the user's call failed; a cluster test
hit exactly that. Kafka's KRaft broker stays fenced until it replayed the metadata log to the
controller's high watermark; weir's broker now asks the metadata leader for its commit index
(a Raft read index) and holds Metadata requests until it has applied that far.

The test kills -9 the broker leading a partition of replication factor 3, waits for the two
others to elect a new leader, creates a topic while it is down, restarts it, and sends it a
Metadata request the moment it listens: the answer must name the new leader and list the new
topic. Against the build before the fix the answer named the killed broker itself.
"""

from __future__ import annotations

import time

import pytest

from test_cluster_metadata import NODE_ID_STRIDE, cluster, create, metadata_v1  # noqa: F401
from test_cluster_replication import leader_of

TOPIC = "led"
BORN = "born-while-down"


@pytest.mark.timeout(180)
def test_a_restarted_broker_answers_metadata_with_the_current_leaders(cluster):
    create(cluster[0].bootstrap, TOPIC, 1, replication_factor=3)
    old_leader, epoch = leader_of(cluster, TOPIC, 0)
    down = cluster[old_leader // NODE_ID_STRIDE - 1]
    others = [b for b in cluster if b is not down]
    down._kill()
    new_leader, _ = leader_of(others, TOPIC, 0, min_epoch=epoch + 1)
    assert new_leader // NODE_ID_STRIDE != old_leader // NODE_ID_STRIDE
    create(others[0].bootstrap, BORN, 1, replication_factor=3)

    down.start()
    started = time.monotonic()
    _, topics = metadata_v1(down.bootstrap, None)
    answered_in = time.monotonic() - started
    print(f"first Metadata answer after the restart in {answered_in * 1e3:.0f} ms")
    error, leaders = topics[TOPIC]
    assert error == 0
    assert leaders[0] == new_leader, (
        f"the restarted broker named {leaders[0]} leader of {TOPIC}-0, the cluster {new_leader}")
    assert BORN in topics, f"the restarted broker does not know {BORN}, created while it was down"
