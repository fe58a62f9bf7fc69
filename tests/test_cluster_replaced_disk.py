"""A broker whose disk was replaced (docs/replication.md, "A replaced disk"; issue 40).

Raft assumes a member never forgets what it acknowledged. A broker started on an empty data
directory has forgotten its entries and its votes, yet keeps its node id. Before this was
handled, such a broker panicked on every start (raft-rs, `to_commit … is out of range`: the
leader still believed it held what it had acknowledged), and once up it voted with an empty
log as if it remembered.

1. Under load (an idempotent and a plain acks=all producer, a consumer checked by the history
   checker), a follower's data directory is wiped (kill -9, `rm -rf`, start), then a
   partition leader's. Each comes back without a panic, says it rejoins, its leaders say it lost
   what it had acknowledged, it catches up (back in every ISR), says the rejoin is complete —
   and nothing acknowledged is lost, the idempotent producer wrote no duplicate, and the
   replicas end byte-identical.
2. The vote it is not entitled to: broker 3 is down while records are acknowledged by brokers
   1 and 2; then 1 and 2 die and 2's disk is replaced. Brokers 2 and 3 alone must not elect
   3 (which lacks those records): 2 withholds its vote until it has caught up with a leader.
   When broker 1 returns, every acknowledged record is there. (Before, 3 was elected with 2's
   empty vote, and broker 1's records were cut when it came back.)
3. A cluster broker's directory started without its cluster settings is refused, and left as
   it was; so is a copy of it that lost its identity and metadata log too.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import threading
import time

import pytest
from confluent_kafka import Producer

from clients import rd_conf, rd_consume
from cluster_net import start_cluster
from conftest import ANSI_RE, Broker, BrokerError, _new_workdir, close_brokers
from history import History
from test_cluster_faults import consumer_loop, consumer_reached, producer_loop, read_whole
from test_cluster_metadata import NODE_ID_STRIDE, create, wait_until
from test_cluster_replication import high_watermark, isr_everywhere, leader_of, same_batches_everywhere

TOPIC = "replaced"
PARTITIONS = 3


@pytest.fixture
def cluster(request):
    try:
        yield start_cluster(request, 3, own_addresses=True, fixed_ports=True)
    finally:
        close_brokers(request, getattr(request.node, "_weir_brokers", []))


def log_of(b) -> str:
    return ANSI_RE.sub("", b.log_tail(1 << 30))


def all_whole(cluster) -> None:
    """A new cluster's brokers all start on empty directories, so all rejoin at first: it
    completes once each has caught up with the first leaders (at once)."""
    for b in cluster:
        wait_until(f"broker {cluster.index(b) + 1} whole", lambda: "rejoin complete" in log_of(b), timeout=60.0)


def replace_disk(b) -> int:
    """kill -9, the data directory removed, started again: returns where its log was."""
    b._kill()
    shutil.rmtree(b.data_dir)
    mark = len(log_of(b))
    b.start()
    return mark


def rejoined(cluster, b, mark: int, partitions: int = PARTITIONS) -> None:
    """`b`, started on an empty directory, says so, catches up, and finishes rejoining."""
    said = log_of(b)[mark:]
    assert "the data directory holds no state" in said, said[-3000:]
    wait_until(f"broker {cluster.index(b) + 1} finished rejoining",
               lambda: "rejoin complete" in log_of(b)[mark:], timeout=90.0)
    for p in range(partitions):
        isr_everywhere(cluster, TOPIC, p, {1, 2, 3})
    for other in cluster:
        assert "panicked" not in log_of(other), log_of(other)[-3000:]


@pytest.mark.timeout(420)
def test_wiped_follower_then_wiped_leader_rejoin_under_load_and_lose_nothing(cluster, request):
    everyone = ",".join(b.bootstrap for b in cluster)
    create(cluster[0].bootstrap, TOPIC, PARTITIONS, replication_factor=3)
    for p in range(PARTITIONS):
        leader_of(cluster, TOPIC, p)
    all_whole(cluster)
    hist = History()
    stop_producers, stop_consumer = threading.Event(), threading.Event()
    fatal: list[str] = []
    consumer_errors: list[str] = []
    threads = [
        threading.Thread(target=producer_loop, daemon=True,
                         args=(hist, everyone, "idem", True, stop_producers, fatal, TOPIC, PARTITIONS)),
        threading.Thread(target=producer_loop, daemon=True,
                         args=(hist, everyone, "plain", False, stop_producers, fatal, TOPIC, PARTITIONS)),
        threading.Thread(target=consumer_loop, daemon=True,
                         args=(hist, everyone, stop_consumer, consumer_errors, TOPIC, PARTITIONS)),
    ]
    request.addfinalizer(lambda: (stop_producers.set(), stop_consumer.set()))
    for t in threads:
        t.start()
    events = []
    try:
        time.sleep(3)
        leader0 = leader_of(cluster, TOPIC, 0)[0] // NODE_ID_STRIDE
        follower = next(b for i, b in enumerate(cluster) if i + 1 != leader0)
        for role, b in (("follower", follower), ("leader of partition 0", cluster[leader0 - 1])):
            # Its leaders must have counted it before: wait until it is in every ISR.
            for p in range(PARTITIONS):
                isr_everywhere(cluster, TOPIC, p, {1, 2, 3})
            time.sleep(2)
            bid = cluster.index(b) + 1
            logs_before = [len(log_of(o)) for o in cluster]
            t0 = time.monotonic()
            mark = replace_disk(b)
            rejoined(cluster, b, mark)
            took = time.monotonic() - t0
            lost_seen = [o for o, before in zip(cluster, logs_before) if o is not b
                         and "a follower lost entries it had acknowledged" in log_of(o)[before:]]
            events.append(f"{role} (broker {bid}) wiped: rejoined in {took:.1f}s; "
                          f"brokers that saw it had lost entries: {[cluster.index(o) + 1 for o in lost_seen]}")
            assert lost_seen, f"no leader noticed that broker {bid} lost what it had acknowledged"
            time.sleep(3)
    finally:
        stop_producers.set()
        for t in threads[:2]:
            t.join(90)

    everyone = ",".join(b.bootstrap for b in cluster)
    ends = {p: high_watermark(everyone, TOPIC, p) for p in range(PARTITIONS)}
    consumer_reached(hist, ends)
    stop_consumer.set()
    threads[2].join(30)
    final = read_whole(cluster, everyone, TOPIC, ends)
    found = hist.check(final)
    acked = hist.acked()
    print("\n" + "\n".join(events))
    print(f"{len(hist.attempts)} records sent, {len(acked)} acknowledged, lost {len(found['lost'])}, "
          f"idempotent duplicates {len(found['duplicate_idempotent'])}, consumer errors {consumer_errors[:3]}")
    assert not fatal, f"a producer hit a fatal error: {fatal}"
    for kind in ["lost", "divergence", "duplicate_idempotent", "non_monotonic", "unknown_value"]:
        assert not found[kind], f"{kind}: {len(found[kind])}, e.g. {found[kind][:5]}"
    assert len(acked) > 100, "the producers got almost nothing through"


@pytest.mark.timeout(300)
def test_a_broker_with_a_replaced_disk_does_not_vote_a_stale_replica_into_leadership(cluster):
    b1, b2, b3 = cluster
    create(b1.bootstrap, TOPIC, 1, replication_factor=3)
    leader_of(cluster, TOPIC, 0)
    all_whole(cluster)
    # Broker 3 misses what follows.
    b3._kill()
    p = Producer(rd_conf(f"{b1.bootstrap},{b2.bootstrap}", acks="all", **{"enable.idempotence": True}))
    acked: list[int] = []
    for i in range(300):
        p.produce(TOPIC, value=f"v{i}".encode(), partition=0,
                  on_delivery=lambda err, m: err is None and acked.append(m.offset()))
        p.poll(0)
    assert p.flush(60) == 0
    assert len(acked) == 300, f"only {len(acked)} of 300 acknowledged with brokers 1 and 2 up"
    end = max(acked) + 1
    # Brokers 1 and 2 die; 2's disk is replaced; 2 and 3 start.
    b1._kill()
    b2._kill()
    shutil.rmtree(b2.data_dir)
    mark2 = len(log_of(b2))
    b2.start()
    b3.start()
    wait_until("broker 2 withholds its vote", lambda: re.search(
        r"not voting until this replica has caught up", log_of(b2)[mark2:]), timeout=60.0)
    time.sleep(5)  # several election timeouts: no leader may come of 2 and 3 alone
    # Broker 1 returns: it (or a replica it brings up to date) leads, and nothing is missing.
    b1.start()
    rejoined(cluster, b2, mark2, partitions=1)
    everyone = ",".join(b.bootstrap for b in cluster)
    assert high_watermark(everyone, TOPIC, 0) >= end
    final = read_whole(cluster, everyone, TOPIC, {0: end})
    assert final[0] == [f"v{i}".encode() for i in range(300)], "acknowledged records lost or reordered"


@pytest.mark.timeout(240)
def test_a_new_cluster_killed_whole_at_its_start_comes_back(cluster):
    """Every broker of a new cluster starts on an empty directory, so each rejoins at first. A
    power cut right after the start, before each has finished, must not leave every replica
    waiting for another's vote: those that caught up recorded it."""
    create(cluster[0].bootstrap, TOPIC, PARTITIONS, replication_factor=3)
    for b in cluster:
        b._kill()
    unfinished = [cluster.index(b) + 1 for b in cluster if (b.data_dir / "rejoining").exists()]
    assert unfinished, "the brokers finished rejoining before the kill: the test tests nothing"
    for b in cluster:
        b.start()
    everyone = ",".join(b.bootstrap for b in cluster)
    p = Producer(rd_conf(everyone, acks="all"))
    delivered: list[int] = []
    for part in range(PARTITIONS):
        p.produce(TOPIC, value=b"after", partition=part,
                  on_delivery=lambda err, m: err is None and delivered.append(m.partition()))
    assert p.flush(60) == 0 and sorted(delivered) == list(range(PARTITIONS)), delivered
    all_whole(cluster)
    print(f"\nbrokers still rejoining when killed: {unfinished}")


@pytest.fixture
def retaining_cluster(request):
    try:
        yield start_cluster(request, 3, own_addresses=True, fixed_ports=True,
                            settings={"log.retention.check.interval.ms": "200"})
    finally:
        close_brokers(request, getattr(request.node, "_weir_brokers", []))


@pytest.mark.timeout(300)
def test_a_disk_replaced_after_the_others_retention_passed_its_end(retaining_cluster):
    """The broker is down (its disk replaced) while the others write 5 MB and delete their
    first segments by retention: what it held is gone everywhere. Started on the new disk, it
    catches up from a snapshot of the leader's segments, rejoins, and holds the same batches."""
    from test_cluster_retention import PAD, RETAIN, SEGMENT, SMALL_BATCHES, batches_from, first_segment
    from test_cluster_retention import TOPIC as KEPT
    from test_cluster_replication import count_records, produce, stored_batches, values
    from clients import rd_consume, rd_producer

    cluster = retaining_cluster
    create(cluster[0].bootstrap, KEPT, 1, replication_factor=3,
           config={"segment.bytes": str(SEGMENT), "retention.bytes": str(RETAIN)})
    leader = leader_of(cluster, KEPT, 0)[0] // NODE_ID_STRIDE
    all_whole(cluster)
    n = 1200
    produce(rd_producer(",".join(b.bootstrap for b in cluster), acks="all", **SMALL_BATCHES), KEPT, 0, 0, 100, pad=PAD)
    replaced = next(b for i, b in enumerate(cluster) if i + 1 != leader)
    others = [b for b in cluster if b is not replaced]
    replaced._kill()
    shutil.rmtree(replaced.data_dir)
    produce(rd_producer(",".join(b.bootstrap for b in others), acks="all", **SMALL_BATCHES), KEPT, 0, 100, n, pad=PAD)
    wait_until("retention on the live replicas",
               lambda: all(first_segment(b) > 0 for b in others), timeout=60.0)
    mark = len(log_of(replaced))
    replaced.start()
    said = log_of(replaced)[mark:]
    assert "the data directory holds no state" in said, said[-3000:]
    wait_until("the replaced broker finished rejoining", lambda: "rejoin complete" in log_of(replaced)[mark:],
               timeout=90.0)
    isr_everywhere(cluster, KEPT, 0, {1, 2, 3})

    def same():
        above = max(first_segment(b) for b in cluster)
        copies = [batches_from(stored_batches(b.data_dir, KEPT, 0), above) for b in cluster]
        if all(c == copies[0] for c in copies) and count_records(copies[0]) == n - above:
            return above
        return None
    above = wait_until("the same batches above every replica's log start", same, timeout=60.0)
    low = min(first_segment(b) for b in others)
    everyone = ",".join(b.bootstrap for b in cluster)
    got = rd_consume(everyone, KEPT, [0], n - above, offset=above)
    assert [r.value for r in got] == values(0, above, n, PAD)
    print(f"\nreplaced broker starts at {first_segment(replaced)} (the others at {low}); agree from {above}")


def test_a_cluster_brokers_directory_is_refused_standalone(cluster):
    """A cluster broker's data directory started without its cluster settings (no node.id, no
    voters) is refused with a message naming the broker it belongs to: served standalone, its
    replicated partitions would take writes the other replicas never see. Started as before, it
    serves its records again."""
    create(cluster[0].bootstrap, TOPIC, 1, replication_factor=3)
    p = Producer(rd_conf(",".join(b.bootstrap for b in cluster), acks="all"))
    delivered: list[int] = []
    for i in range(3):
        p.produce(TOPIC, value=f"before-{i}".encode(), partition=0,
                  on_delivery=lambda err, m: err is None and delivered.append(m.offset()))
    assert p.flush(60) == 0 and sorted(delivered) == [0, 1, 2], delivered
    b = cluster[2]
    same_batches_everywhere(cluster, TOPIC, 0, 3)
    b.stop()
    before = directory_state(b.data_dir)
    cluster_settings = dict(b.settings)
    b.settings = {k: v for k, v in cluster_settings.items()
                  if k not in ("node.id", "controller.quorum.voters", "security.inter.broker.protocol")}
    with pytest.raises(BrokerError, match="data directory of broker 3 of a cluster"):
        b.start()
    assert directory_state(b.data_dir) == before, "the refused start changed the directory"
    # A copy that lost its identity and its metadata log too: its topics are still placed on
    # the cluster's brokers, and that refuses it.
    lost = _new_workdir("lost-identity")
    shutil.copytree(b.data_dir, lost / "data")
    (lost / "data" / "meta.properties").unlink()
    (lost / "data" / "metadata-raft.log").unlink()
    orphan = Broker(lost, b.settings, cores=b.cores)
    try:
        with pytest.raises(BrokerError, match="placed on the brokers of a cluster"):
            orphan.start()
    finally:
        orphan.close()
    b.settings = cluster_settings
    b.start()
    isr_everywhere(cluster, TOPIC, 0, {1, 2, 3})
    got = rd_consume(b.bootstrap, TOPIC, [0], 3)
    assert [r.value for r in got] == [b"before-0", b"before-1", b"before-2"]
    # Broker 3's own replica kept them (the read above may have gone to another leader).
    same_batches_everywhere(cluster, TOPIC, 0, 3)


def directory_state(d) -> dict:
    """Every file under `d`: its size and a hash of its bytes."""
    return {str(f.relative_to(d)): (f.stat().st_size, hashlib.sha256(f.read_bytes()).hexdigest())
            for f in sorted(d.rglob("*")) if f.is_file()}
