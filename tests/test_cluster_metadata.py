"""Three `weir serve` processes as one cluster (docs/replication.md §4): the metadata Raft
group replicates topics and configs to every broker, admin requests work through any broker,
the metadata survives a kill -9 of its leader, and each partition (replication factor 1) is
served by the one broker it was placed on — the others answer NOT_LEADER_OR_FOLLOWER, and a
librdkafka producer bootstrapped on all three still delivers every record.

Each broker state is checked where it lives: its own answers to a raw Metadata v1 request on its
own port (not a client's merged view) and its applied metadata file (`weir-metadata.json`, whose
`applied_index` is the Raft index it reflects). Every wait polls final state with a generous
deadline; the figures printed (creation visible everywhere, failover) are for the report, not
asserted.
"""

from __future__ import annotations

import json
import os
import random
import socket
import struct
import threading
import time

import kafka
import kafka.admin
import pytest
from confluent_kafka import TopicCollection, TopicPartition
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AlterConfigOpType,
                                  ConfigEntry, ConfigResource, NewTopic, ResourcePatternType, ResourceType,
                                  ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion)
from kafka.record.default_records import DefaultRecordBatchBuilder

import kafka_wire as kw
from clients import (CLIENT_TIMEOUT_S, Msg, rd_admin, rd_consume, rd_consumer, rd_poll, rd_produce,
                     rd_producer)
from conftest import TMP_ROOT, Broker, _new_workdir, close_brokers
from tls_certs import peer_tls_settings

NOT_LEADER_OR_FOLLOWER = 6
NODE_ID_STRIDE = 1024
CORES = 2


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@pytest.fixture
def cluster(request):
    """Three brokers, ids 1-3, each with its own inter-broker port named in --peers, talking
    to each other over mutual TLS (all on 127.0.0.1: their certificates name that host). More
    settings for all three: `@pytest.mark.parametrize("cluster", [{...}], indirect=True)`."""
    yield from three_brokers(request, getattr(request, "param", {}))


def three_brokers(request, settings: dict):
    """The `cluster` fixture's body, for fixtures whose settings come from other fixtures:
    yields the three started brokers, closes them after."""
    ports = free_ports(3)
    voters = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(ports))
    brokers = []
    request.node._weir_brokers = brokers
    for i in range(3):
        workdir = _new_workdir(f"{request.node.name}-{i + 1}")
        b = Broker(workdir,
                   {"node.id": str(i + 1), "controller.quorum.voters": voters,
                    **peer_tls_settings(TMP_ROOT, f"broker-{i + 1}-{workdir.name}", "127.0.0.1"),
                    **settings}, cores=CORES)
        brokers.append(b)
    for b in brokers:
        b.start()
    # Partitions are placed on registered brokers: wait until all three have registered.
    every_node = sorted(bid * NODE_ID_STRIDE + c for bid in (1, 2, 3) for c in range(CORES))
    wait_until("every broker registered", lambda: all(
        sorted(metadata_v1(b.bootstrap, [])[0]) == every_node for b in brokers), timeout=60.0)
    yield brokers
    close_brokers(request, brokers)


# -- raw requests to one broker ------------------------------------------------------------------


def metadata_v1(bootstrap: str, topics: list[str] | None = None, full: bool = False) -> tuple[dict, dict]:
    """This broker's own Metadata answer: ({node_id: port}, {topic: (error, {partition: leader})});
    with `full`, each partition's value is (leader, [replicas], [isr])."""
    with kw.connect(bootstrap) as s:
        s.sendall(kw.metadata(1, topics))
        _, body = kw.read_response(s)
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, body, pos)
        pos += struct.calcsize(fmt)
        return v

    def string():
        nonlocal pos
        (n,) = take(">h")
        v = body[pos:pos + max(n, 0)].decode()
        pos += max(n, 0)
        return v

    brokers = {}
    for _ in range(take(">i")[0]):
        node, = take(">i")
        string()
        port, = take(">i")
        string()  # rack
        brokers[node] = port
    take(">i")  # controller
    topics_out = {}
    for _ in range(take(">i")[0]):
        err, = take(">h")
        name = string()
        take(">b")
        parts = {}
        for _ in range(take(">i")[0]):
            _perr, p, leader = take(">hii")
            lists = []
            for _ in range(2):
                (n,) = take(">i")
                lists.append([take(">i")[0] for _ in range(max(n, 0))])
            parts[p] = (leader, *lists) if full else leader
        topics_out[name] = (err, parts)
    return brokers, topics_out


def produce_v3(bootstrap: str, topic: str, partition: int, value: bytes) -> int:
    """One record to one partition of this broker (acks=1); the partition's error code."""
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    b.append(0, timestamp=int(time.time() * 1000), key=b"k", value=value, headers=[])  # keyed: compacted topic
    records = bytes(b.build())
    body = struct.pack(">hhi", -1, 1, 10000) + struct.pack(">i", 1) + kw.string(topic)
    body += struct.pack(">i", 1) + struct.pack(">ii", partition, len(records)) + records
    with kw.connect(bootstrap) as s:
        s.sendall(kw.frame(kw.API_PRODUCE, 3, 7, body))
        _, resp = kw.read_response(s)
    pos = 4  # topics count
    (tlen,) = struct.unpack_from(">h", resp, pos)
    pos += 2 + tlen + 4  # name, partitions count
    _p, err = struct.unpack_from(">ih", resp, pos)
    return err


def applied(b: Broker) -> dict:
    return json.loads((b.data_dir / "weir-metadata.json").read_text())


def wait_until(what: str, check, timeout: float = 40.0, every: float = 0.1):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = check()
            if last:
                return last
        except (OSError, AssertionError, ValueError, KeyError) as e:
            last = e
        time.sleep(every)
    raise AssertionError(f"{what}: not within {timeout}s (last: {last!r})")


def create(bootstrap: str, name: str, partitions: int, config: dict | None = None,
           replication_factor: int = 1) -> None:
    """CreateTopics through `bootstrap`, retried while the cluster has no metadata leader."""
    def attempt():
        admin = rd_admin(bootstrap)
        fs = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=replication_factor,
                                           config=config or {})], request_timeout=CLIENT_TIMEOUT_S)
        fs[name].result(CLIENT_TIMEOUT_S)
        return True
    wait_until(f"creating {name} through {bootstrap}", attempt, timeout=60.0, every=0.5)


def topic_everywhere(brokers: list[Broker], name: str, partitions: int) -> dict:
    """Waits until every broker lists the topic with all partitions led; the applied topic."""
    def check():
        for b in brokers:
            _, topics = metadata_v1(b.bootstrap, [name])
            err, parts = topics[name]
            if err != 0 or len(parts) != partitions or min(parts.values()) < 0:
                return None
        files = [applied(b)["topics"].get(name) for b in brokers]
        return files[0] if files[0] is not None and all(f == files[0] for f in files) else None
    return wait_until(f"{name} on every broker", check)


def leader_broker(brokers: list[Broker]) -> int:
    """The index of the metadata leader, from the brokers' logs (the last leader each saw)."""
    def check():
        seen = set()
        for b in brokers:
            lines = [l for l in b.log_tail(1 << 20).splitlines() if "metadata leader changed" in l]
            if not lines:
                return None
            seen.add(lines[-1].split("leader=")[1].split()[0])
        return seen.pop() if len(seen) == 1 and "0" not in seen else None
    return int(wait_until("one metadata leader seen by all", check)) - 1


@pytest.mark.timeout(240)
def test_cluster_metadata(cluster):
    b1, b2, b3 = cluster
    topic = "orders"
    t0 = time.monotonic()
    create(b1.bootstrap, topic, 6, {"retention.ms": "3600000"})
    t_created = time.monotonic()
    meta = topic_everywhere(cluster, topic, 6)
    t_everywhere = time.monotonic()
    print(f"\nfirst create acknowledged after {t_created - t0:.2f}s; "
          f"visible on all 3 brokers {t_everywhere - t_created:.3f}s later")

    # The same id, partitions, placement and configs everywhere; every broker placed some.
    assert len(meta["id"]) == 32
    assert meta["configs"] == {"retention.ms": "3600000"}
    assert sorted(set(meta["brokers"])) == [1, 2, 3], meta
    for b in cluster:
        node_ports, topics = metadata_v1(b.bootstrap, [topic])
        # Every (broker, core) is listed by every broker.
        assert sorted(node_ports) == sorted(bid * NODE_ID_STRIDE + c for bid in (1, 2, 3) for c in range(CORES))
        leaders = topics[topic][1]
        assert leaders == {p: meta["brokers"][p] * NODE_ID_STRIDE + meta["owners"][p] for p in range(6)}
    # Each broker holds the logs of its own partitions only.
    for i, b in enumerate(cluster):
        dirs = sorted(d.name for d in b.data_dir.iterdir() if d.name.startswith(f"{topic}-"))
        assert dirs == sorted(f"{topic}-{p}" for p in range(6) if meta["brokers"][p] == i + 1), (i + 1, dirs)
    # A client sees the same topic id through any broker.
    admin2 = rd_admin(b2.bootstrap)  # must outlive its futures
    desc = admin2.describe_topics(TopicCollection([topic]))[topic].result(CLIENT_TIMEOUT_S)
    u = desc.topic_id
    mask = (1 << 64) - 1
    assert f"{u.get_most_significant_bits() & mask:016x}{u.get_least_significant_bits() & mask:016x}" == meta["id"]
    assert len(desc.partitions) == 6

    # AlterConfigs through broker 3, seen in broker 1's applied metadata and DescribeConfigs.
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)])
    admin3 = rd_admin(b3.bootstrap)
    for f in admin3.incremental_alter_configs([res], request_timeout=CLIENT_TIMEOUT_S).values():
        f.result(CLIENT_TIMEOUT_S)
    want = {"retention.ms": "7200000", "cleanup.policy": "compact"}
    wait_until("altered configs on every broker",
               lambda: all(applied(b)["topics"][topic]["configs"] == want for b in cluster))
    admin1 = rd_admin(b1.bootstrap)

    def described():
        # Any broker may answer; each applies the change on its own (eventually) consistent.
        [cf] = admin1.describe_configs([ConfigResource(ResourceType.TOPIC, topic)],
                                       request_timeout=CLIENT_TIMEOUT_S).values()
        got = {k: v.value for k, v in cf.result(CLIENT_TIMEOUT_S).items()}
        return got["retention.ms"] == "7200000" and got["cleanup.policy"] == "compact"
    wait_until("DescribeConfigs showing the change", described)

    # A partition produced to or fetched from a broker that does not hold it:
    # NOT_LEADER_OR_FOLLOWER; its own broker takes it.
    owner = {p: meta["brokers"][p] for p in range(6)}
    for p in range(6):
        wrong = next(b for i, b in enumerate(cluster) if i + 1 != owner[p])
        right = cluster[owner[p] - 1]
        assert produce_v3(wrong.bootstrap, topic, p, b"misplaced") == NOT_LEADER_OR_FOLLOWER
        assert produce_v3(right.bootstrap, topic, p, b"placed") == 0
        for b, want in ((wrong, NOT_LEADER_OR_FOLLOWER), (right, 0)):
            with kw.connect(b.bootstrap) as sock:
                sock.sendall(kw.fetch(9, topic, p, max_wait_ms=0))
                _, body = kw.read_response(sock)
            [fetched] = kw.parse_fetch_v4(body)
            assert fetched["error"] == want, (p, b.bootstrap, fetched)
    # librdkafka bootstrapped on all three delivers every record to its partition's broker.
    bootstrap_all = ",".join(b.bootstrap for b in cluster)
    msgs = [Msg(key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % 6) for i in range(600)]
    rd_produce(rd_producer(bootstrap_all, acks="all"), topic, msgs)
    got = rd_consume(bootstrap_all, topic, range(6), 600 + 6)
    values = sorted(r.value for r in got)
    assert values == sorted([m.value for m in msgs] + [b"placed"] * 6)

    # A consumer group: one coordinator for the whole cluster, so offsets committed by a
    # consumer bootstrapped on all three are what a consumer bootstrapped on broker 3 finds.
    group = "billing"
    c = rd_consumer(bootstrap_all, **{"group.id": group, "enable.auto.offset.store": True})
    try:
        c.subscribe([topic])
        assert len(rd_poll(c, 606)) == 606
        c.commit(asynchronous=False)
    finally:
        c.close()
    c = rd_consumer(b3.bootstrap, **{"group.id": group})
    try:
        committed = c.committed([TopicPartition(topic, p) for p in range(6)], timeout=CLIENT_TIMEOUT_S)
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=CLIENT_TIMEOUT_S)[1]
                for p in range(6)}
        assert {tp.partition: tp.offset for tp in committed} == ends
    finally:
        c.close()

    # kill -9 the metadata leader; a topic created on a survivor; the dead one restarts and has both.
    leader = leader_broker(cluster)
    dead = cluster[leader]
    survivor = cluster[(leader + 1) % 3]
    dead._kill()
    t_kill = time.monotonic()
    create(survivor.bootstrap, "payments", 6)
    t_failover = time.monotonic()
    print(f"metadata leader (broker {leader + 1}) killed: a create on broker "
          f"{cluster.index(survivor) + 1} acknowledged {t_failover - t_kill:.2f}s later")
    alive = [b for b in cluster if b is not dead]
    placed = wait_until("payments on the survivors", lambda: all(
        "payments" in applied(b)["topics"] for b in alive) and applied(alive[0])["topics"]["payments"])
    dead.start()
    everyone = topic_everywhere(cluster, "payments", 6)
    assert everyone == placed
    assert applied(dead)["topics"][topic] == applied(survivor)["topics"][topic]
    _, topics = metadata_v1(dead.bootstrap)
    assert {"orders", "payments"} <= set(topics)
    # Records of the first topic are all still there (the restarted broker's partitions too).
    got = rd_consume(bootstrap_all, topic, range(6), 600 + 6)
    assert sorted(r.value for r in got) == values
    # The topic created while it was down has partitions on it too (one on each (broker, core),
    # all equally loaded), and they work: every record delivered and read back.
    assert sorted(set(everyone["brokers"])) == [1, 2, 3], everyone
    pay = [Msg(key=f"p{i}".encode(), value=f"pay{i}".encode(), partition=i % 6) for i in range(180)]
    rd_produce(rd_producer(bootstrap_all, acks="all"), "payments", pay)
    got = rd_consume(bootstrap_all, "payments", range(6), 180)
    assert sorted(r.value for r in got) == sorted(m.value for m in pay)

    # kafka-python's admin (it sends CreateTopics to the controller Metadata names: the
    # answering broker's own node, which forwards) through broker 2.
    kp = kafka.KafkaAdminClient(bootstrap_servers=b2.bootstrap, request_timeout_ms=int(CLIENT_TIMEOUT_S * 1000))
    try:
        kp.create_topics([kafka.admin.NewTopic("audit", 2, 1)])
    finally:
        kp.close()
    topic_everywhere(cluster, "audit", 2)

    # ACLs and SASL users are cluster metadata too: created through one broker, on all.
    acl = AclBinding(ResourceType.TOPIC, "audit", ResourcePatternType.LITERAL, "User:alice", "*",
                     AclOperation.WRITE, AclPermissionType.ALLOW)
    for f in admin1.create_acls([acl]).values():
        f.result(CLIENT_TIMEOUT_S)
    alice = UserScramCredentialUpsertion("alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                                         b"alice-secret")
    for f in admin2.alter_user_scram_credentials([alice]).values():
        f.result(CLIENT_TIMEOUT_S)
    wait_until("the ACL and the user on every broker", lambda: all(
        len(applied(b).get("acls", [])) == 1 and "SCRAM-SHA-256" in applied(b).get("users", {}).get("alice", {})
        for b in cluster))
    every = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)
    admin3 = rd_admin(b3.bootstrap)
    wait_until("DescribeAcls listing it", lambda: [str(b) for b in admin3.describe_acls(every).result(
        CLIENT_TIMEOUT_S)] == [str(acl)])
    for f in admin3.delete_acls([every]).values():
        assert [str(b) for b in f.result(CLIENT_TIMEOUT_S)] == [str(acl)]
    wait_until("the ACL deleted everywhere", lambda: all(not applied(b).get("acls") for b in cluster))

    # Garbage on a broker's inter-broker port closes that connection, not the broker.
    peer_port = int(b1.settings["controller.quorum.voters"].split(",")[0].rsplit(":", 1)[1])
    for junk in (b"\x00\x00\x00\x05\x09abcd", b"\xff\xff\xff\xff", b"\x00\x00\x00\x03\x01\xff\xff"):
        with socket.create_connection(("127.0.0.1", peer_port), timeout=5) as s:
            s.sendall(junk)
            s.settimeout(5)
            while s.recv(4096):  # a TLS alert (the peer port speaks mutual TLS), then closed
                pass
    b1.check_alive()

    # DeleteTopics through the restarted broker removes it everywhere.
    admin = rd_admin(dead.bootstrap)  # must outlive its futures
    admin.delete_topics(["payments"], request_timeout=CLIENT_TIMEOUT_S)["payments"].result(CLIENT_TIMEOUT_S)
    wait_until("payments deleted everywhere",
               lambda: all("payments" not in applied(b)["topics"] for b in cluster))

    # Every broker stops cleanly (SIGTERM, exit 0), and the whole cluster comes back with its
    # metadata and records: the same topics on every broker, the records all there.
    # (The consumers above made the brokers create `__consumer_offsets`, replicated: its
    # leaders may move while the brokers stop, so only what leadership cannot change is
    # compared for it.)
    def kept(b):
        topics = applied(b)["topics"]
        if "__consumer_offsets" in topics:
            t = topics["__consumer_offsets"]
            topics["__consumer_offsets"] = (t["id"], t["configs"], t["replicas"])
        return topics
    before = {b.data_dir: kept(b) for b in cluster}
    for b in cluster:
        b.stop()
    for b in cluster:
        b.start()
    assert {b.data_dir: kept(b) for b in cluster} == before
    assert set(before[b1.data_dir]) - {"__consumer_offsets"} == {"orders", "audit"}
    assert "alice" in applied(b3)["users"]
    topic_everywhere(cluster, "audit", 2)
    got = rd_consume(",".join(b.bootstrap for b in cluster), topic, range(6), 600 + 6)
    assert sorted(r.value for r in got) == values
    create(b2.bootstrap, "after-restart", 1)
    topic_everywhere(cluster, "after-restart", 1)


# The long run (WEIR_CLUSTER_CYCLES=200) takes ~2-3 s per kill: its timeout grows with it.
KILL_CYCLES = int(os.environ.get("WEIR_CLUSTER_CYCLES", "3"))


@pytest.mark.timeout(240 + 15 * KILL_CYCLES)
def test_metadata_leader_kills_lose_no_acknowledged_creation(cluster):
    """kill -9 of the metadata leader, again and again, while topics are being created through
    random live brokers: every creation a client saw acknowledged is, at the end, on every
    broker with the same id and placement (WEIR_CLUSTER_CYCLES kills, 3 by default; the design's
    long run is 200)."""
    cycles = KILL_CYCLES
    acked: list[str] = []
    failures: list[str] = []
    t_start = time.monotonic()
    attempts = [0]
    stop = threading.Event()
    rng = random.Random(19)
    rng_lock = threading.Lock()

    def creator(thread: int):
        i = 0
        while not stop.is_set():
            name = f"kill-{thread}-{i}"
            i += 1
            alive = [b for b in cluster if b.alive()]
            if not alive:
                time.sleep(0.1)
                continue
            with rng_lock:
                target = rng.choice(alive)
                attempts[0] += 1
            admin = rd_admin(target.bootstrap)
            try:
                admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1)],
                                    request_timeout=5)[name].result(8)
                acked.append(name)
            except Exception as e:  # unknown outcome (timeout, broker killed mid-request): not counted
                failures.append(f"{time.monotonic() - t_start:.2f}s {name} via {cluster.index(target) + 1}: {e}")
            time.sleep(0.1)

    # Two creators: one waiting on a broker just killed (until its 5 s timeout) does not stop
    # the other.
    threads = [threading.Thread(target=creator, args=(n,), daemon=True) for n in range(2)]
    for t in threads:
        t.start()
    failovers = []
    for _ in range(cycles):
        leader = leader_broker(cluster)
        before = len(acked)
        cluster[leader]._kill()
        t_kill = time.monotonic()
        wait_until("a creation acknowledged after the kill", lambda: len(acked) > before, timeout=60.0, every=0.05)
        failovers.append(time.monotonic() - t_kill)
        cluster[leader].start()
        time.sleep(0.5)
    stop.set()
    for t in threads:
        t.join(60)
    print(f"\n{cycles} leader kills: {len(acked)} of {attempts[0]} creations acknowledged; "
          f"first acknowledgement after each kill: {', '.join(f'{s:.2f}s' for s in failovers)}")
    print("\n".join(failures[:5]))
    assert len(acked) >= cycles

    def same_everywhere():
        files = [applied(b)["topics"] for b in cluster]
        return all(n in f and f[n] == files[0][n] for f in files for n in acked)
    wait_until("every acknowledged creation on every broker", same_everywhere, timeout=60.0)
    # And each broker lists them itself.
    for b in cluster:
        _, topics = metadata_v1(b.bootstrap)
        assert set(acked) <= set(topics)
