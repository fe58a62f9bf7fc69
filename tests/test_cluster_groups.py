"""Consumer groups in a cluster survive their coordinator's death (docs/replication.md,
"Consumer groups in a cluster").

Committed offsets live in the replicated internal topic `__consumer_offsets` (16 partitions,
replication factor 3, created by the brokers for the first group); a group's coordinator is
the leader of its partition. Three `weir serve` processes; a librdkafka consumer group commits
offsets; its coordinator's broker is killed with SIGKILL. The offsets committed before the kill
must be what the new coordinator answers (a consumer that found none would start over from
`auto.offset.reset`), the running consumer must go on and commit through the new coordinator,
and a new member of the group must resume exactly at the last commit.
"""

from __future__ import annotations

import struct
import time

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition

from clients import CLIENT_TIMEOUT_S, rd_admin, rd_consumer, rd_poll, rd_producer
from test_cluster_metadata import NODE_ID_STRIDE, cluster, create, metadata_v1, wait_until  # noqa: F401
from test_cluster_replication import leader_of, produce

TOPIC = "orders"
GROUP = "billing"
PARTITIONS = 2
N = 600  # records per partition


def coordinator_of(bootstrap: str, group: str) -> int:
    """The node id of the group's coordinator, as the brokers name it (FindCoordinator)."""
    admin = rd_admin(bootstrap)
    d = admin.describe_consumer_groups([group], request_timeout=CLIENT_TIMEOUT_S)[group].result(CLIENT_TIMEOUT_S)
    return d.coordinator.id


def committed(bootstrap: str, group: str) -> dict[int, int]:
    """The group's committed offsets per partition of TOPIC (OffsetFetch); -1001 for none."""
    admin = rd_admin(bootstrap)
    req = ConsumerGroupTopicPartitions(group, [TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
    got = admin.list_consumer_group_offsets([req], request_timeout=CLIENT_TIMEOUT_S)[group].result(CLIENT_TIMEOUT_S)
    out = {}
    for tp in got.topic_partitions:
        assert tp.error is None, tp.error
        out[tp.partition] = tp.offset
    return out


def consume_and_commit(consumer, done, seen: set, target) -> None:
    """Reads and commits (synchronously, after every poll) until `target(done)` holds, `done`
    being the last offsets committed per partition (updated in place). A commit that fails
    while the coordinator moves is not retried: the member goes on polling (which is how it
    rejoins), and what it had not committed is delivered again, from the committed offset, as
    at-least-once consumers expect. Every record delivered lands in `seen`."""
    deadline = time.monotonic() + 90
    while not target(done):
        assert time.monotonic() < deadline, f"committed only {done} within 90 s"
        msgs = consumer.consume(num_messages=100, timeout=1.0)
        offsets = {}
        for m in msgs:
            assert m.error() is None, f"consumer error: {m.error()}"
            seen.add((m.partition(), m.offset()))
            offsets[m.partition()] = m.offset() + 1
        if not offsets:
            continue
        try:
            consumer.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in offsets.items()], asynchronous=False)
        except KafkaException as e:
            print(f"commit failed (the coordinator moves): {e}")
            continue
        done.update(offsets)


def test_group_offsets_survive_the_coordinators_death(cluster):
    everyone = ",".join(b.bootstrap for b in cluster)
    create(cluster[0].bootstrap, TOPIC, PARTITIONS, replication_factor=3)
    for p in range(PARTITIONS):
        leader_of(cluster, TOPIC, p)
    producer = rd_producer(everyone, acks="all")
    for p in range(PARTITIONS):
        produce(producer, TOPIC, p, 0, N)

    group_conf = {"group.id": GROUP, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
    consumer = rd_consumer(everyone, **group_conf)
    consumer.subscribe([TOPIC])
    done: dict[int, int] = {}
    seen: set[tuple[int, int]] = set()
    consume_and_commit(consumer, done, seen, lambda d: sum(d.values()) >= N)
    before = {p: done.get(p, -1001) for p in range(PARTITIONS)}  # -1001: nothing committed

    # The offsets topic exists, replicated on every broker, marked internal.
    _, topics = metadata_v1(cluster[0].bootstrap, ["__consumer_offsets"], full=True)
    err, parts = topics["__consumer_offsets"]
    assert err == 0 and len(parts) == 16, topics
    assert all(len(replicas) == 3 for _, replicas, _ in parts.values()), parts

    # What the coordinator holds, then SIGKILL of its broker.
    coordinator = coordinator_of(everyone, GROUP)
    assert committed(everyone, GROUP) == before
    dead = cluster[coordinator // NODE_ID_STRIDE - 1]
    survivors = [b for b in cluster if b is not dead]
    dead._kill()
    t0 = time.monotonic()
    alive = ",".join(b.bootstrap for b in survivors)

    # A new coordinator on a survivor answers the offsets committed before the kill.
    new = wait_until("a new coordinator on a survivor",
                     lambda: (c := coordinator_of(alive, GROUP)) // NODE_ID_STRIDE != dead_id(cluster, dead) and c)
    assert committed(alive, GROUP) == before, "offsets committed before the coordinator died are gone"
    took = time.monotonic() - t0

    # The running member goes on (as the member the new coordinator restored) and commits there.
    consume_and_commit(consumer, done, seen, lambda d: all(d.get(p) == N for p in range(PARTITIONS)))
    consumer.close()
    after = dict(done)
    assert seen == {(p, o) for p in range(PARTITIONS) for o in range(N)}, "a record was never delivered"
    assert committed(alive, GROUP) == after

    # A new member resumes at the last commit: nothing is read again, nothing skipped.
    producer = rd_producer(alive, acks="all")
    for p in range(PARTITIONS):
        produce(producer, TOPIC, p, N, N + 10)
    second = rd_consumer(alive, **group_conf)
    second.subscribe([TOPIC])
    try:
        recs = rd_poll(second, 2 * 10, timeout=60)
        assert sorted((r.partition, r.offset) for r in recs) == \
            sorted((p, o) for p in range(PARTITIONS) for o in range(N, N + 10))
    finally:
        second.close()

    # The killed broker comes back and serves again; the group is still where it was.
    dead.start()
    wait_until("every broker answers the group's offsets",
               lambda: all(committed(b.bootstrap, GROUP) == after for b in cluster))
    print(f"coordinator {coordinator} killed; new coordinator {new} answered the committed offsets "
          f"after {took:.2f}s")


def dead_id(cluster, dead) -> int:
    return cluster.index(dead) + 1


def log_start(data_dir, topic: str, partition: int) -> int:
    """A replica's log start offset as its `log_start_offset` file records it (0: none)."""
    f = data_dir / f"{topic}-{partition}" / "log_start_offset"
    if not f.exists():
        return 0
    b = f.read_bytes()
    assert len(b) == 20 and b[:8] == b"WEIRLSO1", b
    return struct.unpack(">Q", b[8:16])[0]


@pytest.mark.parametrize("cluster", [{"internal.topics.compaction.min.bytes": "16384"}], indirect=True)
def test_offsets_partitions_are_compacted_on_every_replica(cluster):
    """docs/replication.md, "Compacting the internal topics": a group commits the same two
    partitions' offsets over and over; its `__consumer_offsets` partition is compacted by its
    leader (the live offsets written again, then a cut record) and every replica moves its log
    start past the old commits. The offsets a new coordinator loads from the cut log — after
    the old one's broker is killed — are the last ones committed."""
    everyone = ",".join(b.bootstrap for b in cluster)
    create(cluster[0].bootstrap, TOPIC, PARTITIONS, replication_factor=3)
    for p in range(PARTITIONS):
        leader_of(cluster, TOPIC, p)
    consumer = rd_consumer(everyone, **{"group.id": GROUP})
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    last = {}
    for i in range(600):
        offsets = [TopicPartition(TOPIC, p, i * 10 + p) for p in range(PARTITIONS)]
        consumer.commit(offsets=offsets, asynchronous=False)
        last = {p: i * 10 + p for p in range(PARTITIONS)}
    consumer.close()
    assert committed(everyone, GROUP) == last

    # Every replica of the group's partition cut its log (the partition whose log start moved).
    def cut_everywhere():
        starts = {}
        for part in range(16):
            s = [log_start(b.data_dir, "__consumer_offsets", part) for b in cluster]
            if any(s):
                starts[part] = s
        return starts if starts and all(all(v) for v in starts.values()) else None
    starts = wait_until("every replica of the group's offsets partition moved its log start", cut_everywhere)
    print(f"log starts of the compacted partitions (per broker): {starts}")

    # A new coordinator loads the cut log: the same offsets.
    coordinator = coordinator_of(everyone, GROUP)
    dead = cluster[coordinator // NODE_ID_STRIDE - 1]
    survivors = [b for b in cluster if b is not dead]
    dead._kill()
    alive = ",".join(b.bootstrap for b in survivors)
    wait_until("a new coordinator on a survivor",
               lambda: coordinator_of(alive, GROUP) // NODE_ID_STRIDE != dead_id(cluster, dead))
    assert committed(alive, GROUP) == last, "offsets lost or moved back by the compaction"


def group_members(bootstrap: str, group: str) -> tuple[str, list[str]]:
    """The group's state and member ids as its coordinator describes them (DescribeGroups)."""
    admin = rd_admin(bootstrap)
    d = admin.describe_consumer_groups([group], request_timeout=CLIENT_TIMEOUT_S)[group].result(CLIENT_TIMEOUT_S)
    return d.state.name, sorted(m.member_id for m in d.members)


def test_a_coordinators_death_costs_no_rebalance(cluster):
    """Issue 19, "what is left" item 2: group membership is persisted in `__consumer_offsets`.

    What it replaces: a new coordinator started with no members, so the running consumer's
    heartbeat got UNKNOWN_MEMBER_ID after its coordinator's broker died and it rejoined — its
    partitions revoked and assigned again, a new member id, one rebalance per failover. Now
    the generation stored when the group became Stable is loaded with the bucket: the member
    keeps heartbeating and consuming under the same member id and generation, and its
    on_assign callback runs once in the whole test."""
    everyone = ",".join(b.bootstrap for b in cluster)
    create(cluster[0].bootstrap, TOPIC, PARTITIONS, replication_factor=3)
    for p in range(PARTITIONS):
        leader_of(cluster, TOPIC, p)
    producer = rd_producer(everyone, acks="all")
    for p in range(PARTITIONS):
        produce(producer, TOPIC, p, 0, 20)

    assigns, revokes = [], []
    # The client's own session check (no heartbeat answered for session.timeout.ms: it
    # rejoins) must not fire while the partition's leadership moves: 15 s is ample.
    consumer = rd_consumer(everyone, **{"group.id": GROUP, "session.timeout.ms": 15000,
                                        "heartbeat.interval.ms": 300})
    consumer.subscribe([TOPIC], on_assign=lambda c, ps: assigns.append(len(ps)),
                       on_revoke=lambda c, ps: revokes.append(len(ps)))
    seen: set[tuple[int, int]] = set()

    def consume_until(want: set, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not want <= seen:
            assert time.monotonic() < deadline, f"missing {sorted(want - seen)[:5]}... after {timeout}s"
            for m in consumer.consume(num_messages=100, timeout=0.5):
                assert m.error() is None, f"consumer error: {m.error()}"
                seen.add((m.partition(), m.offset()))

    consume_until({(p, o) for p in range(PARTITIONS) for o in range(20)})
    member = consumer.memberid()
    assert assigns == [PARTITIONS] and member, (assigns, member)
    assert group_members(everyone, GROUP) == ("STABLE", [member])

    coordinator = coordinator_of(everyone, GROUP)
    dead = cluster[coordinator // NODE_ID_STRIDE - 1]
    survivors = [b for b in cluster if b is not dead]
    dead._kill()
    t0 = time.monotonic()
    alive = ",".join(b.bootstrap for b in survivors)

    # Records produced after the kill reach the same member.
    producer = rd_producer(alive, acks="all")
    for p in range(PARTITIONS):
        produce(producer, TOPIC, p, 20, 40)
    consume_until({(p, o) for p in range(PARTITIONS) for o in range(40)})

    # The new coordinator (on a survivor) has the member; it heartbeats there.
    def described_by_survivor():
        if coordinator_of(alive, GROUP) // NODE_ID_STRIDE == dead_id(cluster, dead):
            return None
        consumer.consume(num_messages=100, timeout=0.2)  # serves the callbacks
        return group_members(alive, GROUP) == ("STABLE", [consumer.memberid()])
    wait_until("the new coordinator describes the group with the running member", described_by_survivor)
    took = time.monotonic() - t0
    # A few more heartbeats with the new coordinator (a member it did not know would be told
    # UNKNOWN_MEMBER_ID by now and rejoin, running the callbacks below).
    end = time.monotonic() + 3
    while time.monotonic() < end:
        for m in consumer.consume(num_messages=100, timeout=0.3):
            assert m.error() is None, f"consumer error: {m.error()}"
    print(f"coordinator {coordinator} killed; the survivor coordinated member {member} after {took:.2f}s; "
          f"assigns {assigns}, revokes {revokes}")
    assert consumer.memberid() == member, "the member rejoined under a new member id"
    assert (assigns, revokes) == ([PARTITIONS], []), "the coordinator's death caused a rebalance"
    consumer.close()
