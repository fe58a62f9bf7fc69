"""Transactions in a cluster (docs/replication.md, "Transactions in a cluster").

Three `weir serve` processes; a topic of replication factor 3 whose partitions are led by
different brokers. A confluent-kafka transactional producer writes to every partition, so the
transaction coordinator writes its markers through the Raft groups of partitions led by other
brokers, and checks (KIP-890) come to it from those leaders. The test asserts what a user of
exactly-once would notice:

- committed transactions are read exactly once by read_committed consumers, aborted ones never
  (read_uncommitted consumers see both); every replica holds the same batches, markers included;
- offsets sent with a transaction (`send_offsets_to_transaction`) become the group's committed
  offsets on its coordinator, a broker other than the transaction coordinator;
- a transaction open while one of its partitions' leaders is killed with SIGKILL still commits:
  the marker goes to the new leader, and read_committed consumers then read all of it; the
  killed broker, restarted, holds the same batches;
- a transaction open while its coordinator's broker is killed is aborted by the new coordinator
  when a new instance of the producer initialises (the old instance is fenced), and the new
  instance commits.

Before this, a transactional produce to a replicated partition was refused (INVALID_TXN_STATE),
so `produce` in a transaction failed at once.
"""

from __future__ import annotations

import struct
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from clients import CLIENT_TIMEOUT_S, rd_admin, rd_conf, rd_consumer
from kafka_wire import connect, frame, read_response, string
from test_cluster_metadata import NODE_ID_STRIDE, cluster, create, metadata_v1, wait_until  # noqa: F401
from test_cluster_replication import leader_of, stored_batches

TOPIC = "payments"
PARTITIONS = 3
TXN = "payments-writer"
INPUT = "requests"
TXN_CALL_S = 60


def find_coordinator(bootstrap: str, key: str, key_type: int) -> int:
    """FindCoordinator v1 (key type 0 = group, 1 = transactional id): the coordinator's node id,
    or -1 while the broker answers an error."""
    with connect(bootstrap) as sock:
        sock.sendall(frame(10, 1, 7, string(key) + struct.pack(">b", key_type)))
        _cid, body = read_response(sock)
    _throttle, error = struct.unpack_from(">ih", body, 0)
    if error:
        return -1
    pos = 6
    (mlen,) = struct.unpack_from(">h", body, pos)
    pos += 2 + max(mlen, 0)
    (node,) = struct.unpack_from(">i", body, pos)
    return node


def coordinator_everywhere(brokers, key: str, key_type: int) -> int:
    """Waits until every live broker names the same coordinator; its broker id."""
    def check():
        nodes = {find_coordinator(b.bootstrap, key, key_type) for b in brokers}
        return nodes.pop() if len(nodes) == 1 and -1 not in nodes else None
    return wait_until(f"one coordinator of {key} named everywhere", check, timeout=60.0) // NODE_ID_STRIDE


def txn_producer(bootstrap: str) -> Producer:
    return Producer(rd_conf(bootstrap, **{
        "transactional.id": TXN, "enable.idempotence": True, "acks": "all", "linger.ms": 5,
        "message.timeout.ms": 60000, "transaction.timeout.ms": 60000}))


def ok(call, *args):
    """A transactional call that must succeed: an error fails the test naming the call."""
    try:
        return call(*args)
    except KafkaException as e:
        pytest.fail(f"{call.__name__} failed: {e.args[0]}")


def write(producer: Producer, topic: str, tag: str, n: int) -> None:
    """n records on every partition, values `<tag>-<p>-<i>`, all delivered (not yet committed)."""
    failed = []

    def report(err, _msg):
        if err is not None:
            failed.append(err)
    for p in range(PARTITIONS):
        for i in range(n):
            producer.produce(topic, key=b"k", value=f"{tag}-{p}-{i}".encode(), partition=p,
                             on_delivery=report)
    assert producer.flush(TXN_CALL_S) == 0
    assert not failed, failed[:3]


def expected(tags: list[str], n: int, p: int) -> list[bytes]:
    return [f"{t}-{p}-{i}".encode() for t in tags for i in range(n)]


def read_to_end(bootstrap: str, topic: str, isolation: str, partitions: int = PARTITIONS,
                timeout: float = CLIENT_TIMEOUT_S) -> dict[int, list[bytes]]:
    """Every record value of every partition from the start to its end (read_committed: the
    last stable offset), in offset order (also used by tests/test_cluster_faults.py)."""
    c = rd_consumer(bootstrap, **{"isolation.level": isolation, "enable.partition.eof": True})
    out: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        at_end: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(at_end) < partitions:
            assert time.monotonic() < deadline, f"read only to the end of {sorted(at_end)}"
            msg = c.poll(1.0)
            if msg is None:
                continue
            if msg.error() is not None:
                assert msg.error().code() == -191, msg.error()  # _PARTITION_EOF
                at_end.add(msg.partition())
                continue
            at_end.discard(msg.partition())
            out[msg.partition()].append(msg.value())
    finally:
        c.close()
    return out


def control_batches(batches: bytes) -> int:
    """How many of the concatenated batches are control batches (transaction markers)."""
    n, pos = 0, 0
    while pos < len(batches):
        _base, length = struct.unpack_from(">qi", batches, pos)
        (attributes,) = struct.unpack_from(">h", batches, pos + 21)
        n += bool(attributes & 0x20)
        pos += 12 + length
    return n


def same_everywhere(brokers, topic: str, markers: int) -> list[int]:
    """Waits until every broker's replica of every partition holds the same batches, with at
    least `markers` control batches each (an EndTxn retried after a failed marker write writes
    the markers that had succeeded again, as Kafka's coordinator does); the count per
    partition."""
    def check():
        counts = []
        for p in range(PARTITIONS):
            copies = [stored_batches(b.data_dir, topic, p) for b in brokers]
            if not all(c == copies[0] for c in copies) or control_batches(copies[0]) < markers:
                return None
            counts.append(control_batches(copies[0]))
        return counts
    return wait_until(f"the same batches with {markers} markers on every replica", check)


def group_committed(bootstrap: str, group: str) -> dict[int, int]:
    from confluent_kafka import ConsumerGroupTopicPartitions
    admin = rd_admin(bootstrap)
    req = ConsumerGroupTopicPartitions(group, [TopicPartition(INPUT, 0)])
    got = admin.list_consumer_group_offsets([req], request_timeout=CLIENT_TIMEOUT_S)[group].result(CLIENT_TIMEOUT_S)
    return {tp.partition: tp.offset for tp in got.topic_partitions}


@pytest.mark.timeout(240)
def test_transactions_across_brokers_commit_abort_and_survive_a_leaders_death(cluster):
    everyone = ",".join(b.bootstrap for b in cluster)
    create(cluster[0].bootstrap, INPUT, 1, replication_factor=3)
    # Each partition is first led by its preferred replica, and placement spreads those over
    # the brokers (tests/test_cluster_leader_balance.py): the leaders are on two brokers at least.
    topic = TOPIC
    create(cluster[0].bootstrap, topic, PARTITIONS, replication_factor=3)
    leaders = {p: leader_of(cluster, topic, p)[0] // NODE_ID_STRIDE for p in range(PARTITIONS)}
    assert len(set(leaders.values())) >= 2, f"the leaders are all on one broker: {leaders}"

    # The coordinators: the transaction's, and a group's on another broker, so the offsets
    # sent with the transaction are ended there by a call between brokers.
    coordinator = coordinator_everywhere(cluster, TXN, 1)
    group = next(g for g in (f"transformer-{i}" for i in range(64))
                 if coordinator_everywhere(cluster, g, 0) != coordinator)
    group_coordinator = coordinator_everywhere(cluster, group, 0)
    print(f"leaders {leaders}, transaction coordinator {coordinator}, group coordinator {group_coordinator}")

    producer = txn_producer(everyone)
    ok(producer.init_transactions, TXN_CALL_S)

    # A committed, an aborted and a committed transaction, each on every partition.
    n = 50
    for tag, commit in (("a", True), ("b", False), ("c", True)):
        ok(producer.begin_transaction)
        write(producer, topic, tag, n)
        ok(producer.commit_transaction if commit else producer.abort_transaction, TXN_CALL_S)
    committed = read_to_end(everyone, topic, "read_committed")
    uncommitted = read_to_end(everyone, topic, "read_uncommitted")
    for p in range(PARTITIONS):
        assert committed[p] == expected(["a", "c"], n, p), f"partition {p}: read_committed saw the wrong records"
        assert uncommitted[p] == expected(["a", "b", "c"], n, p), f"partition {p}: read_uncommitted"
    assert same_everywhere(cluster, topic, markers=3) == [3] * PARTITIONS

    # Consume-transform-produce: offsets sent with the transaction land in the group at its
    # coordinator (another broker) when the transaction commits.
    feeder = Producer(rd_conf(everyone, acks="all"))
    for i in range(10):
        feeder.produce(INPUT, value=f"req-{i}".encode(), partition=0)
    assert feeder.flush(CLIENT_TIMEOUT_S) == 0
    source = Consumer(rd_conf(everyone, **{"group.id": group, "enable.auto.commit": False,
                                           "auto.offset.reset": "earliest",
                                           "isolation.level": "read_committed"}))
    source.subscribe([INPUT])
    taken = []
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while len(taken) < 10:
        assert time.monotonic() < deadline, f"the group read {len(taken)} of 10 inputs"
        for m in source.consume(num_messages=10, timeout=1.0):
            assert m.error() is None, m.error()
            taken.append(m)
    ok(producer.begin_transaction)
    write(producer, topic, "d", 5)
    ok(producer.send_offsets_to_transaction, [TopicPartition(INPUT, 0, taken[-1].offset() + 1)],
       source.consumer_group_metadata(), TXN_CALL_S)
    ok(producer.commit_transaction, TXN_CALL_S)
    source.close()
    assert group_committed(everyone, group) == {0: 10}, "the transaction's offsets were not committed"

    # A transaction open while the leader of one of its partitions dies: it still commits.
    victim_id = next((b for b in set(leaders.values()) if b not in (coordinator, group_coordinator)), None)
    if victim_id is None:
        victim_id = next(b for b in set(leaders.values()) if b != coordinator)
    victim = cluster[victim_id - 1]
    lost = [p for p, b in leaders.items() if b == victim_id]
    survivors = [b for b in cluster if b is not victim]
    ok(producer.begin_transaction)
    write(producer, topic, "e", n)
    victim._kill()
    t0 = time.monotonic()
    ok(producer.commit_transaction, TXN_CALL_S)
    print(f"broker {victim_id} (leader of {lost}) killed; the commit returned {time.monotonic() - t0:.2f} s later")
    alive = ",".join(b.bootstrap for b in survivors)
    committed = read_to_end(alive, topic, "read_committed")
    for p in range(PARTITIONS):
        want = expected(["a", "c"], n, p) + expected(["d"], 5, p) + expected(["e"], n, p)
        assert committed[p] == want, f"partition {p}: read_committed after the leader's death"

    # The killed broker comes back and holds what the survivors hold.
    victim.start()
    print(f"markers per partition: {same_everywhere(cluster, topic, markers=5)}")

    # A transaction open while its coordinator's broker is killed: a new instance of the
    # producer initialises through the new coordinator (the leader of the id's
    # __transaction_state partition on a survivor), which fences the old instance and aborts
    # the open transaction on every partition; the new instance then commits.
    coordinator = coordinator_everywhere(cluster, TXN, 1)
    ok(producer.begin_transaction)
    write(producer, topic, "f", n)
    dead = cluster[coordinator - 1]
    dead._kill()
    t0 = time.monotonic()
    survivors = [b for b in cluster if b is not dead]
    alive = ",".join(b.bootstrap for b in survivors)
    successor = txn_producer(alive)
    ok(successor.init_transactions, TXN_CALL_S)
    took = time.monotonic() - t0
    assert coordinator_everywhere(survivors, TXN, 1) != coordinator
    with pytest.raises(KafkaException):
        producer.commit_transaction(TXN_CALL_S)  # fenced: its transaction was aborted
    ok(successor.begin_transaction)
    write(successor, topic, "g", n)
    ok(successor.commit_transaction, TXN_CALL_S)
    print(f"coordinator broker {coordinator} killed; a new instance initialised {took:.2f} s later")
    committed = read_to_end(alive, topic, "read_committed")
    for p in range(PARTITIONS):
        want = (expected(["a", "c"], n, p) + expected(["d"], 5, p) + expected(["e"], n, p)
                + expected(["g"], n, p))
        assert committed[p] == want, f"partition {p}: read_committed after the coordinator's death"
    dead.start()
    same_everywhere(cluster, topic, markers=7)
