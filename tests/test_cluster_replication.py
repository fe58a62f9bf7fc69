"""Partitions replicated across three `weir serve` processes (docs/replication.md §3, and
§5.1 for the replication factor and placement).

`test_replication_factor_per_topic`: CreateTopics' `replication_factor` is accepted up to the
number of registered brokers (INVALID_REPLICATION_FACTOR above it), each partition's replicas
are on distinct brokers and on the same core index of each (core-aligned: the brokers have
equal core counts), the placement is in every broker's applied metadata and every broker's own
Metadata answer lists the same replicas; factor 1 keeps step 2's layout; CreatePartitions keeps
the factor; DeleteTopics removes every replica.

`test_replicated_partition_survives_its_leaders_death`: each partition of factor 3 is a Raft
group of its replicas. A librdkafka acks=all producer writes to both partitions (one on core 0
of every broker, one on core 1); every replica then holds the same batches, byte for byte (its
segment files, read directly); acks=1 is taken by the leader's broker only; kill -9 of the
leader's broker: the survivors elect a new leader, every broker's Metadata names it with a
higher leader epoch, every acknowledged record is read back at its offset, producing goes on;
the dead broker restarts and catches up (its segments identical again); no consumer reads past
the high watermark ListOffsets gives.

`test_uncommitted_suffix_is_cut_when_the_old_leader_returns`: a batch only the old leader wrote
is never exposed, and is cut from its segments when it rejoins under a new leader.

`test_no_acknowledged_record_is_lost_when_the_leader_dies_under_load`: a librdkafka acks=all
producer writes for 6 s while the leader is killed 1.5 s in; every acknowledged record is then
at the offset it was acknowledged with.

The three-broker fixture is test_cluster_metadata's; each broker's state is read where it lives
(its own raw Metadata v1 answer, its applied `weir-metadata.json`, its segment files). Waits poll
the final state with generous deadlines; the printed figures are for the report, not asserted.
"""

from __future__ import annotations

import struct
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import NewPartitions, NewTopic

from clients import CLIENT_TIMEOUT_S, Msg, rd_admin, rd_consume, rd_consumer, rd_produce, rd_producer
from test_cluster_metadata import (NODE_ID_STRIDE, NOT_LEADER_OR_FOLLOWER, applied, cluster,  # noqa: F401
                                   create, metadata_v1, produce_v3, wait_until)


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

    # Each partition's first elected leader is its preferred replica (the first of its
    # placement, which spreads them over the brokers): it campaigns before the others time
    # out. Left to raft-rs's random timeouts, all six would be preferred once in 729 runs.
    def elected():
        t = applied(b1)["topics"]["rf3"]
        epochs = t.get("leader_epochs", [])
        if len(epochs) < 6 or min(epochs) < 1:
            return None
        return [(t["brokers"][p], t["replicas"][p][0][0]) for p in range(6)]
    chosen = wait_until("every rf3 partition led", elected)
    assert all(leader == preferred for leader, preferred in chosen), f"(leader, preferred): {chosen}"

    # Deleting it stops its groups and removes every replica's directory on every broker.
    admin = rd_admin(b2.bootstrap)
    fs = admin.delete_topics(["rf3"], request_timeout=CLIENT_TIMEOUT_S)
    fs["rf3"].result(CLIENT_TIMEOUT_S)
    wait_until("rf3's replicas removed everywhere", lambda: all(
        "rf3" not in applied(b)["topics"] and not list(b.data_dir.glob("rf3-*")) for b in cluster))


def stored_batches(data_dir: Path, topic: str, partition: int) -> bytes:
    """The record batches of a partition's segment files, concatenated in offset order (the
    preallocated zeros after the last batch left out)."""
    out = b""
    for seg in sorted((data_dir / f"{topic}-{partition}").glob("*.log")):
        data = seg.read_bytes()
        pos = 0
        while pos + 12 <= len(data):
            _base, length = struct.unpack_from(">qi", data, pos)
            if length <= 0 or pos + 12 + length > len(data):
                break
            out += data[pos:pos + 12 + length]
            pos += 12 + length
    return out


def leader_of(brokers, topic: str, partition: int, min_epoch: int = 1) -> tuple[int, int]:
    """Waits until every live broker names the same leader of the partition with an epoch of
    at least `min_epoch` (its Metadata answer and its applied metadata); (leader node, epoch).
    The two are read apart, so a broker counts only when they agree: its Metadata answer can
    lag the applied file by a moment, and a stale answer beside a new epoch once sent a
    SIGSTOP to a follower instead of the leader."""
    def check():
        seen = set()
        for b in brokers:
            _, topics = metadata_v1(b.bootstrap, [topic])
            t = applied(b)["topics"][topic]
            epoch = t.get("leader_epochs", [0] * (partition + 1))[partition]
            if epoch < min_epoch:
                return None
            leader = topics[topic][1][partition]
            if leader // NODE_ID_STRIDE != t["brokers"][partition]:
                return None
            seen.add((leader, epoch))
        return seen.pop() if len(seen) == 1 else None
    return wait_until(f"one leader of {topic}-{partition} named everywhere", check)


def isr_everywhere(brokers, topic: str, partition: int, expect: set[int]) -> None:
    """Waits until every broker's Metadata lists exactly the brokers `expect` as the
    partition's in-sync replicas."""
    def check():
        for b in brokers:
            _, topics = metadata_v1(b.bootstrap, [topic], full=True)
            _leader, _replicas, isr = topics[topic][1][partition]
            if {n // NODE_ID_STRIDE for n in isr} != expect:
                return None
        return True
    wait_until(f"in-sync replicas of {topic}-{partition} = brokers {sorted(expect)}", check)


def count_records(batches: bytes) -> int:
    records, pos = 0, 0
    while pos < len(batches):
        _base, length = struct.unpack_from(">qi", batches, pos)
        records += struct.unpack_from(">i", batches, pos + 57)[0]
        pos += 12 + length
    return records


def same_batches_everywhere(brokers, topic: str, partition: int, expect_records: int) -> bytes:
    """Waits until every broker's replica holds the same batches, `expect_records` records."""
    def check():
        copies = [stored_batches(b.data_dir, topic, partition) for b in brokers]
        if not all(c == copies[0] for c in copies):
            return None
        return copies[0] if count_records(copies[0]) == expect_records else None
    return wait_until(f"{topic}-{partition}: the same {expect_records} records on every replica", check)


def high_watermark(bootstrap: str, topic: str, partition: int) -> int:
    c = rd_consumer(bootstrap)
    try:
        tp = TopicPartition(topic, partition)
        return c.get_watermark_offsets(tp, timeout=CLIENT_TIMEOUT_S, cached=False)[1]
    finally:
        c.close()


def values(partition: int, lo: int, hi: int, pad: int = 0) -> list[bytes]:
    return [f"p{partition}-v{i}".encode() + b"." * pad for i in range(lo, hi)]


def produce(producer, topic: str, partition: int, lo: int, hi: int, pad: int = 0) -> None:
    msgs = [Msg(b"k", v, partition=partition) for v in values(partition, lo, hi, pad)]
    delivered = rd_produce(producer, topic, msgs)
    assert [m.offset() for m in delivered] == list(range(lo, hi))


def read_all(bootstrap: str, topic: str, partition: int, n: int) -> list[bytes]:
    """Every record of the partition from offset 0, checking none is past the high watermark."""
    hw = high_watermark(bootstrap, topic, partition)
    got = rd_consume(bootstrap, topic, [partition], n)
    assert [r.offset for r in got] == list(range(n)), "offsets are dense from 0"
    assert max(r.offset for r in got) < hw, (hw, n)
    return [r.value for r in got]


@pytest.mark.timeout(180)
def test_replicated_partition_survives_its_leaders_death(cluster):
    # Two partitions: the first is placed on core 0 of every broker, the second on core 1
    # (its Raft traffic hops from core 0, which holds the peer connections, to core 1).
    topic = "repl"
    everyone = ",".join(b.bootstrap for b in cluster)
    create(cluster[0].bootstrap, topic, 2, replication_factor=3)
    placed = applied(cluster[0])["topics"][topic]["replicas"]
    assert {r[1] for r in placed[0]} != {r[1] for r in placed[1]}, f"both on one core: {placed}"
    t0 = time.monotonic()
    leaders = [leader_of(cluster, topic, p) for p in (0, 1)]
    for p in (0, 1):
        isr_everywhere(cluster, topic, p, {1, 2, 3})
    print(f"first leaders of {topic}: {leaders} (node, epoch), {time.monotonic() - t0:.2f}s after creation")

    producer = rd_producer(everyone, acks="all")
    for p in (0, 1):
        produce(producer, topic, p, 0, 200)
        same_batches_everywhere(cluster, topic, p, 200)
        assert read_all(everyone, topic, p, 200) == values(p, 0, 200)

    # acks=1 to the leader's broker is answered once the leader wrote it (and read once
    # committed); the followers' brokers refuse it.
    leader, epoch = leaders[0]
    dead = cluster[leader // NODE_ID_STRIDE - 1]
    for b in cluster:
        err = produce_v3(b.bootstrap, topic, 0, b"acks1")
        assert err == (0 if b is dead else NOT_LEADER_OR_FOLLOWER), (b.bootstrap, err)
    before = same_batches_everywhere(cluster, topic, 0, 201)
    assert high_watermark(everyone, topic, 0) == 201

    # kill -9 the broker leading partition 0: a survivor leads it at a higher epoch, named by
    # both; every acknowledged record of both partitions is still there; producing goes on.
    survivors = [b for b in cluster if b is not dead]
    dead._kill()
    t_kill = time.monotonic()
    new_leader, new_epoch = leader_of(survivors, topic, 0, epoch + 1)
    print(f"leader of {topic}-0 killed; node {new_leader} leads at epoch {new_epoch} "
          f"{time.monotonic() - t_kill:.2f}s later")
    assert new_leader // NODE_ID_STRIDE != leader // NODE_ID_STRIDE
    dead_id = leader // NODE_ID_STRIDE
    isr_everywhere(survivors, topic, 0, {1, 2, 3} - {dead_id})
    alive = ",".join(b.bootstrap for b in survivors)
    assert read_all(alive, topic, 0, 201) == values(0, 0, 200) + [b"acks1"]
    assert stored_batches(survivors[0].data_dir, topic, 0).startswith(before)
    produce(producer, topic, 0, 201, 301)
    # 6.4 MB while the broker is down: more than a replica keeps cached (4 MiB), so its
    # catch-up needs entries the leader reads back from its segments.
    produce(producer, topic, 1, 200, 300, pad=64 << 10)
    assert read_all(alive, topic, 1, 300) == values(1, 0, 200) + values(1, 200, 300, 64 << 10)

    # The dead broker comes back as a follower and catches up on both partitions.
    dead.start()
    same_batches_everywhere(cluster, topic, 0, 301)
    same_batches_everywhere(cluster, topic, 1, 300)
    isr_everywhere(cluster, topic, 0, {1, 2, 3})
    assert read_all(everyone, topic, 0, 301) == values(0, 0, 200) + [b"acks1"] + values(0, 201, 301)
    producer.flush(5)


@pytest.mark.timeout(180)
def test_uncommitted_suffix_is_cut_when_the_old_leader_returns(cluster):
    """A leader whose followers are both gone (kill -9) still writes an acks=1 batch before it
    notices (check-quorum steps it down after an election timeout): the batch is never
    committed, so no consumer sees it. The leader is killed too; the followers come back and
    elect one of them, which takes more records at the same offsets. The old leader then
    returns as a follower and must cut that batch from its segments (`truncate_to`) before it
    copies the new leader's: in the end all three replicas hold the same bytes, without it."""
    topic = "cut"
    everyone = ",".join(b.bootstrap for b in cluster)
    create(cluster[0].bootstrap, topic, 1, replication_factor=3)
    leader, epoch = leader_of(cluster, topic, 0)
    producer = rd_producer(everyone, acks="all")
    produce(producer, topic, 0, 0, 50)
    same_batches_everywhere(cluster, topic, 0, 50)

    old = cluster[leader // NODE_ID_STRIDE - 1]
    followers = [b for b in cluster if b is not old]
    for b in followers:
        b._kill()
    assert produce_v3(old.bootstrap, topic, 0, b"never-committed") == 0
    assert count_records(stored_batches(old.data_dir, topic, 0)) == 51, "the old leader wrote it"
    assert high_watermark(old.bootstrap, topic, 0) == 50, "but does not expose it"
    old._kill()
    for b in followers:
        b.start()
    new_leader, new_epoch = leader_of(followers, topic, 0, epoch + 1)
    assert new_leader // NODE_ID_STRIDE != leader // NODE_ID_STRIDE
    alive = ",".join(b.bootstrap for b in followers)  # restarted: new client ports
    producer = rd_producer(alive, acks="all")
    produce(producer, topic, 0, 50, 80)
    assert read_all(alive, topic, 0, 80) == values(0, 0, 80)

    old.start()
    everyone = ",".join(b.bootstrap for b in cluster)
    same = same_batches_everywhere(cluster, topic, 0, 80)
    assert b"never-committed" not in same
    # The restarted broker answers Metadata from its applied metadata, which may still name
    # it leader for a moment (a KRaft broker stays fenced until it caught up; weir does not):
    # librdkafka's ListOffsets then got NOT_LEADER_FOR_PARTITION, which it does not retry.
    leader_of(cluster, topic, 0, new_epoch)
    assert read_all(everyone, topic, 0, 80) == values(0, 0, 80)
    assert "replacing a suffix of the Raft log" in old.log_tail(1 << 20)
    producer.flush(5)


@pytest.mark.timeout(180)
def test_no_acknowledged_record_is_lost_when_the_leader_dies_under_load(cluster):
    """The mission's promise under acks=all: a producer keeps writing while the partition's
    leader is killed (kill -9); every record it was told was written is, after the failover,
    at the offset it was acknowledged with. Records may be written twice (the producer is not
    idempotent, so a retry of a batch the old leader had replicated is new data) — counted,
    not failed."""
    topic = "load"
    everyone = ",".join(b.bootstrap for b in cluster)
    create(cluster[0].bootstrap, topic, 1, replication_factor=3)
    leader, epoch = leader_of(cluster, topic, 0)
    dead = cluster[leader // NODE_ID_STRIDE - 1]
    survivors = [b for b in cluster if b is not dead]
    producer = rd_producer(everyone, acks="all", **{"linger.ms": 2, "retry.backoff.ms": 50})
    acked: dict[bytes, int] = {}
    failed = []

    def on_delivery(err, msg):
        if err is None:
            acked[msg.value()] = msg.offset()
        else:
            failed.append(err)

    sent = 0
    start = time.monotonic()
    killed_at = None
    while time.monotonic() - start < 6.0:
        producer.produce(topic, value=f"L{sent}".encode(), partition=0, on_delivery=on_delivery)
        sent += 1
        producer.poll(0.002)
        if killed_at is None and time.monotonic() - start > 1.5:
            dead._kill()
            killed_at = len(acked)
    assert producer.flush(60) == 0
    assert killed_at and len(acked) > killed_at, "records were acknowledged before and after the kill"
    new_leader, _ = leader_of(survivors, topic, 0, epoch + 1)
    alive = ",".join(b.bootstrap for b in survivors)
    hw = high_watermark(alive, topic, 0)
    got = rd_consume(alive, topic, [0], hw)
    at = {r.offset: r.value for r in got}
    lost = [(v, o) for v, o in acked.items() if at.get(o) != v]
    duplicates = len(got) - len(set(r.value for r in got))
    print(f"{sent} sent, {len(acked)} acknowledged ({killed_at} before the kill), "
          f"{len(failed)} failed, {duplicates} written twice, high watermark {hw}")
    assert not lost, f"{len(lost)} acknowledged records lost or moved, first: {lost[:3]}"
