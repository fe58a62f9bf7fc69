"""Partition groups' Raft messages go from core to core (issue 36, step 4; issue 37, RF 3).

Before, every partition message left a broker through core 0 and arrived on core 0 of the
peer: a replica on core 1 handed each message to core 0 over the request mesh, and the
receiving core 0 handed it on to core 1 the same way — two cross-core hops per message, and
core 0 busy with the traffic of every core. Now each core keeps its own connections to the
peers' cores (`broker::peer::links`): a connection opens with a hello naming the core it is
for, the peer's core 0 hands the socket to that core, and the messages go from the core of
one replica to the core of the other with no hop in between.

What a user would notice, and what is checked here on three brokers of two cores each, over
mutual TLS (the `cluster` fixture): records produced with acks=all to partitions led on
either core are acknowledged and read back whole, and no partition message crossed between
cores of a broker on its way out or in (`weir_peer_messages_relayed_total` stays 0 on every
core of every broker) while the cores other than 0 sent theirs on their own connections
(`weir_peer_messages_linked_total`). The links close after 10 s with nothing to carry; the next
records open them again, still with no message crossing cores.
"""

from __future__ import annotations

import pytest

from clients import rd_producer
from test_cluster_metadata import cluster, create, wait_until  # noqa: F401
from test_cluster_replication import leader_of, produce, read_all, values
from test_metrics import scrape, total


@pytest.mark.timeout(240)
def test_partition_messages_go_from_core_to_core(cluster):
    topic = "linked"
    partitions = 6
    create(cluster[0].bootstrap, topic, partitions, replication_factor=3)
    for p in range(partitions):
        leader_of(cluster, topic, p)
    everyone = ",".join(b.bootstrap for b in cluster)
    producer = rd_producer(everyone, acks="all")
    for p in range(partitions):
        produce(producer, topic, p, 0, 300, pad=200)
    producer.flush(10)
    for p in range(partitions):
        assert read_all(everyone, topic, p, 300) == values(p, 0, 300, pad=200)

    before = no_message_crossed_cores(cluster, {})
    assert all(links(b) > 0 for b in cluster), [links(b) for b in cluster]

    # Idle: the groups hibernate and the links close (10 s); then records again.
    wait_until("every core link closed, idle", lambda: all(links(b) == 0 for b in cluster), timeout=30)
    for p in range(partitions):
        produce(producer, topic, p, 300, 400, pad=200)
    producer.flush(10)
    for p in range(partitions):
        assert read_all(everyone, topic, p, 400) == values(p, 0, 400, pad=200)
    no_message_crossed_cores(cluster, before)
    for b in cluster:
        log = b.log_path.read_text(errors="replace")
        assert "bad frame" not in log and "refused a peer connection" not in log, b.log_tail()
        b.check_alive()


def links(b) -> float:
    """The broker's open core links, all cores."""
    return total(scrape(b), "weir_peer_links")


def no_message_crossed_cores(cluster, before: dict) -> dict:
    """Checks that no partition message crossed cores on any broker and that every core sent
    some since `before` (per broker and core: linked); returns the linked counts now."""
    now = {}
    for b in cluster:
        bid = b.settings["node.id"]
        samples = scrape(b)
        relayed = {c: total(samples, "weir_peer_messages_relayed_total", core=c) for c in range(b.cores)}
        linked = {c: total(samples, "weir_peer_messages_linked_total", core=c) for c in range(b.cores)}
        print(f"broker {bid}: linked {linked}, relayed {relayed}")
        assert all(v == 0 for v in relayed.values()), f"broker {bid}: partition messages crossed cores: {relayed}"
        # Every core holds replicas of this topic (six partitions over two cores) and sent
        # its messages itself.
        assert all(v > before.get((bid, c), 0) for c, v in linked.items()), (
            f"broker {bid}: a core sent no partition message on its links: {linked}")
        now.update({(bid, c): v for c, v in linked.items()})
    return now
