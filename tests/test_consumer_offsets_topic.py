"""`__consumer_offsets` reads as Kafka writes it, on a standalone broker and in a cluster.

Burrow, Kafka's console consumer with its offsets formatter and older lag exporters learn
committed offsets by consuming `__consumer_offsets`. On a standalone weir broker the topic did
not exist (the group coordinators keep their offsets in bucket logs of their own), and in a
cluster it held weir's own record layout. Now Metadata lists it (16 partitions, internal), and a
Fetch of it reads each bucket in Kafka's key/value schemas (OffsetCommitKey v1 /
OffsetCommitValue v3, GroupMetadataKey v2 / GroupMetadataValue v3), at the offsets of the log.
The decoder below is written from Kafka's message definitions
(`group-coordinator/src/main/resources/common/message/*.json`), not from weir's code; what it
reads must agree with what OffsetFetch answers. Producing to the topic is refused, as Kafka does.
"""

from __future__ import annotations

import struct
import time

import confluent_kafka
import kafka
import pytest
from confluent_kafka import KafkaError, TopicPartition
from confluent_kafka.admin import NewTopic

from clients import rd_admin, rd_consumer, rd_create_topic, rd_producer, wait_for_topic
from cluster_net import start_cluster
from conftest import close_brokers

OFFSETS = "__consumer_offsets"
BUCKETS = 16


# -- Kafka's schemas, decoded -------------------------------------------------------------------


class Reader:
    def __init__(self, b: bytes):
        self.b, self.i = b, 0

    def take(self, fmt: str):
        (v,) = struct.unpack_from(fmt, self.b, self.i)
        self.i += struct.calcsize(fmt)
        return v

    def string(self) -> str | None:
        n = self.take(">h")
        if n < 0:
            return None
        s = self.b[self.i:self.i + n].decode()
        self.i += n
        return s

    def bytes_(self) -> bytes:
        n = self.take(">i")
        v = self.b[self.i:self.i + n]
        self.i += n
        return v

    def done(self) -> bool:
        return self.i == len(self.b)


def decode(key: bytes, value: bytes | None):
    """('offset', (group, topic, partition), (offset, leader_epoch, metadata, commit_ts) | None)
    or ('group', group, dict | None)."""
    k = Reader(key)
    version = k.take(">h")
    if version in (0, 1):
        group, topic, partition = k.string(), k.string(), k.take(">i")
        assert k.done()
        if value is None:
            return "offset", (group, topic, partition), None
        v = Reader(value)
        vv = v.take(">h")
        assert vv == 3, f"OffsetCommitValue version {vv}"
        got = (v.take(">q"), v.take(">i"), v.string(), v.take(">q"))
        assert v.done()
        return "offset", (group, topic, partition), got
    assert version == 2, f"key version {version}"
    group = k.string()
    assert k.done()
    if value is None:
        return "group", group, None
    v = Reader(value)
    vv = v.take(">h")
    assert vv == 3, f"GroupMetadataValue version {vv}"
    g = {"protocol_type": v.string(), "generation": v.take(">i"), "protocol": v.string(),
         "leader": v.string(), "state_ts": v.take(">q"), "members": []}
    for _ in range(v.take(">i")):
        g["members"].append({"member_id": v.string(), "instance_id": v.string(), "client_id": v.string(),
                             "client_host": v.string(), "rebalance_timeout": v.take(">i"),
                             "session_timeout": v.take(">i"), "subscription": v.bytes_(),
                             "assignment": v.bytes_()})
    assert v.done()
    return "group", group, g


def read_offsets_topic(bootstrap: str, timeout: float = 30.0):
    """Every record of every partition of `__consumer_offsets` up to its end now, decoded, in
    offset order per partition; also the end offsets."""
    c = rd_consumer(bootstrap)
    try:
        ends = {}
        for p in range(BUCKETS):
            lo, hi = c.get_watermark_offsets(TopicPartition(OFFSETS, p), timeout=15)
            ends[p] = hi
        c.assign([TopicPartition(OFFSETS, p, confluent_kafka.OFFSET_BEGINNING) for p in range(BUCKETS)
                  if ends[p] > 0])
        want = {p for p, hi in ends.items() if hi > 0}
        got: dict[int, list] = {p: [] for p in want}
        last = {p: -1 for p in want}
        deadline = time.monotonic() + timeout
        while any(last[p] < ends[p] - 1 for p in want):
            assert time.monotonic() < deadline, f"read up to {last}, ends {ends}"
            m = c.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, m.error()
            p = m.partition()
            assert m.offset() > last[p], "offsets only grow"
            last[p] = m.offset()
            got[p].append((m.offset(), decode(m.key(), m.value())))
        return got, ends
    finally:
        c.close()


def latest_offsets(records, group: str) -> dict[tuple[str, int], int | None]:
    """What the records say `group` has committed: the last value of each key."""
    out = {}
    for recs in records.values():
        for _, (kind, key, value) in recs:
            if kind == "offset" and key[0] == group:
                out[(key[1], key[2])] = None if value is None else value[0]
    return out


def group_state(records, group: str):
    state = None
    for recs in records.values():
        for _, (kind, key, value) in recs:
            if kind == "group" and key == group:
                state = value
    return state


# -- the scenario ------------------------------------------------------------------------------


def commit_some(bootstrap: str, topic: str, group: str) -> dict[int, int]:
    """A subscribed group member reads and commits: returns what it committed."""
    p = rd_producer(bootstrap)
    for i in range(60):
        p.produce(topic, value=b"v%d" % i, partition=i % 3)
    assert p.flush(30) == 0
    c = rd_consumer(bootstrap, **{"group.id": group, "enable.auto.commit": False,
                                   "client.id": "offsets-topic-reader", "auto.offset.reset": "earliest"})
    try:
        c.subscribe([topic])
        seen = 0
        deadline = time.monotonic() + 30
        while seen < 60:
            assert time.monotonic() < deadline, f"read {seen} of 60"
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                seen += 1
        want = {0: 17, 1: 20, 2: 5}
        c.commit(offsets=[TopicPartition(topic, q, o, metadata=f"md{q}") for q, o in want.items()],
                 asynchronous=False)
        # The member is still in the group: its Stable state is stored as a group metadata record.
        got = {tp.partition: tp.offset for tp in c.committed([TopicPartition(topic, q) for q in range(3)],
                                                            timeout=15)}
        assert got == want
        return want
    finally:
        c.close()


def check_topic_reads_as_kafka_writes_it(bootstrap: str, topic: str, group: str, cluster: bool):
    # In a cluster the topic is made by the first FindCoordinator, as Kafka makes it; a
    # standalone broker lists it from the start.
    want = commit_some(bootstrap, topic, group)
    md = rd_admin(bootstrap).list_topics(timeout=10)
    assert OFFSETS in md.topics, f"Metadata lists {sorted(md.topics)}"
    assert len(md.topics[OFFSETS].partitions) == BUCKETS
    if not cluster:
        kp = kafka.KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            (t,) = kp.describe_topics([OFFSETS])
            assert t["is_internal"] and t["error_code"] == 0 and len(t["partitions"]) == BUCKETS, t
        finally:
            kp.close()

    records, ends = read_offsets_topic(bootstrap)
    offsets = latest_offsets(records, group)
    assert offsets == {(topic, q): o for q, o in want.items()}, offsets
    # Offset, metadata and leader epoch as OffsetFetch answers them (kafka-python shows the
    # metadata as stored: librdkafka sends it with its terminating NUL).
    last = {}
    for recs in records.values():
        for _, (kind, key, v) in recs:
            if kind == "offset" and key[0] == group:
                last[key[2]] = v
    kp = kafka.KafkaConsumer(bootstrap_servers=bootstrap, group_id=group)
    try:
        for q in want:
            f = kp.committed(kafka.TopicPartition(topic, q), metadata=True)
            assert (last[q][0], last[q][2], last[q][1]) == (f.offset, f.metadata, f.leader_epoch), (last[q], f)
            assert last[q][2].rstrip("\x00") == f"md{q}"
    finally:
        kp.close()
    assert all(abs(v[3] / 1000 - time.time()) < 300 for v in last.values()), "commit timestamps are ms since the epoch"
    # The member's Stable generation, as Kafka stores it; then, the member gone, a tombstone.
    states = [v for recs in records.values() for _, (kind, key, v) in recs if kind == "group" and key == group]
    stable = [s for s in states if s is not None]
    assert stable, states
    s = stable[-1]
    assert (s["protocol_type"], s["generation"] >= 1, len(s["members"])) == ("consumer", True, 1), s
    assert s["protocol"] in ("range", "roundrobin", "cooperative-sticky"), s
    member = s["members"][0]
    assert s["leader"] == member["member_id"] and member["client_id"] == "offsets-topic-reader", s
    assert topic.encode() in member["subscription"], "the chosen protocol's subscription names the topic"
    # Consumed offsets and the high watermark agree: a consumer at the end has read everything.
    total = sum(len(r) for r in records.values())
    assert total >= 3 and all(ends[p] >= len(records[p]) for p in records)

    # The group's offsets deleted: tombstones, as Kafka writes them.
    admin = rd_admin(bootstrap)
    fs = admin.delete_consumer_groups([group], request_timeout=15)
    fs[group].result(30)
    records, _ = read_offsets_topic(bootstrap)
    assert latest_offsets(records, group) == {(topic, q): None for q in want}, latest_offsets(records, group)
    assert group_state(records, group) is None


def test_consumer_offsets_reads_as_kafka_writes_it_on_a_standalone_broker(broker, topic_name):
    rd_create_topic(broker.bootstrap, topic_name, 3)
    check_topic_reads_as_kafka_writes_it(broker.bootstrap, topic_name, f"{topic_name}-g", cluster=False)


@pytest.fixture
def cluster(request):
    try:
        yield start_cluster(request, 3, own_addresses=False)
    finally:
        close_brokers(request, getattr(request.node, "_weir_brokers", []))


def test_consumer_offsets_reads_as_kafka_writes_it_in_a_cluster(cluster, topic_name):
    b = ",".join(x.bootstrap for x in cluster)
    admin = rd_admin(b)
    admin.create_topics([NewTopic(topic_name, 3, 3)])[topic_name].result(30)
    wait_for_topic(b, topic_name, 3, timeout=30)
    check_topic_reads_as_kafka_writes_it(b, topic_name, f"{topic_name}-g", cluster=True)


def test_an_empty_offsets_partition_reads_as_empty_and_producing_to_the_topic_is_refused(broker):
    c = rd_consumer(broker.bootstrap)
    try:
        for p in range(BUCKETS):
            lo, hi = c.get_watermark_offsets(TopicPartition(OFFSETS, p), timeout=15)
            assert lo == 0 and hi == 0, (p, lo, hi)
    finally:
        c.close()
    errors = []
    p = rd_producer(broker.bootstrap, **{"message.timeout.ms": 10000, "retries": 0})
    p.produce(OFFSETS, key=b"\x00\x01", value=b"forged", partition=0,
              on_delivery=lambda err, msg: errors.append(err))
    p.flush(20)
    assert len(errors) == 1 and errors[0] is not None, errors
    assert errors[0].code() == KafkaError.TOPIC_EXCEPTION, errors[0]
