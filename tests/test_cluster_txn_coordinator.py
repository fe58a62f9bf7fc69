"""A transactional id survives the death of its transaction coordinator's broker
(docs/replication.md, "Transaction coordinators in a cluster").

The coordinator's state lives in the replicated internal topic `__transaction_state` (16
partitions, replication factor 3, created by the brokers for the first transactional
producer); a transactional id's coordinator is the leader of its partition. Three
`weir serve` processes; a librdkafka transactional producer initialises; its coordinator's
broker is killed with SIGKILL. A new instance with the same transactional.id must then get,
through the survivors, the *same* producer id with a higher epoch, and the old instance must be
fenced. Before this was built every broker coordinated the ids on its own, from its local
log: the survivors knew nothing of the id, so the new instance got a new producer id and the
old one, when it came to a broker that still knew it, was never fenced.
"""

from __future__ import annotations

import struct
import time

import kafka
import kafka.errors
import pytest
from confluent_kafka import KafkaException, Producer

import kafka_wire as kw
from clients import CLIENT_TIMEOUT_S
from test_cluster_metadata import NODE_ID_STRIDE, cluster, create, metadata_v1, wait_until  # noqa: F401
from test_cluster_replication import leader_of

TXN_ID = "ledger-writer"
TOPIC = "ledger"
API_FIND_COORDINATOR = 10


def find_coordinator(bootstrap: str, txn_id: str) -> tuple[int, int]:
    """FindCoordinator v1 with key_type 1 (transaction) sent to this broker alone: (error code,
    node id)."""
    body = kw.string(txn_id) + struct.pack(">b", 1)
    with kw.connect(bootstrap) as s:
        s.sendall(kw.frame(API_FIND_COORDINATOR, 1, 5, body))
        _, resp = kw.read_response(s)
    # throttle_time_ms, error_code, error_message (nullable string), node_id, host, port
    pos = 4
    (err,) = struct.unpack_from(">h", resp, pos)
    pos += 2
    (mlen,) = struct.unpack_from(">h", resp, pos)
    pos += 2 + max(mlen, 0)
    (node,) = struct.unpack_from(">i", resp, pos)
    return err, node


def coordinator(brokers) -> int:
    """The node every one of `brokers` names as TXN_ID's coordinator (they must agree)."""
    answers = [find_coordinator(b.bootstrap, TXN_ID) for b in brokers]
    assert all(e == 0 for e, _ in answers), answers
    nodes = {n for _, n in answers}
    assert len(nodes) == 1, f"the brokers name different coordinators: {answers}"
    return nodes.pop()


def admin_call(bootstrap: str, call):
    """`call(admin)` with a kafka-python admin client, retried for 20 s: after a SIGKILL the
    client's metadata still lists the dead broker, and it may pick it for a request."""
    deadline = time.monotonic() + 20
    while True:
        admin = None
        try:
            admin = kafka.KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
            return call(admin)
        except (OSError, kafka.errors.KafkaError) as e:
            if time.monotonic() > deadline:
                raise
            print(f"admin request failed, retrying: {e!r}")
            time.sleep(0.5)
        finally:
            if admin is not None:
                admin.close()


def described(bootstrap: str) -> tuple[int, int, str, int]:
    """DescribeTransactions of TXN_ID at its coordinator (kafka-python's admin client finds it
    with FindCoordinator): (producer id, epoch, state, coordinator node)."""
    d = admin_call(bootstrap, lambda a: a.describe_transactions([TXN_ID])[TXN_ID])
    return d.producer_id, d.producer_epoch, getattr(d.state, "value", d.state), d.coordinator_id


def listed(bootstrap: str, node: int) -> dict[str, int]:
    """ListTransactions of one broker (`node`): transactional id -> producer id."""
    got = admin_call(bootstrap, lambda a: a.list_transactions(broker_ids=[node])[node])
    return {t.transactional_id: t.producer_id for t in got}


def txn_producer(bootstrap: str) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "transactional.id": TXN_ID,
                     "transaction.timeout.ms": 60000, "socket.timeout.ms": 5000,
                     "message.timeout.ms": 20000})


def test_transactional_id_survives_its_coordinators_death(cluster):
    everyone = ",".join(b.bootstrap for b in cluster)
    create(cluster[0].bootstrap, TOPIC, 1, replication_factor=3)
    leader_of(cluster, TOPIC, 0)
    # The first FindCoordinator creates __transaction_state (COORDINATOR_NOT_AVAILABLE until
    # then); librdkafka retries it inside init_transactions.
    first = txn_producer(everyone)
    first.init_transactions(CLIENT_TIMEOUT_S)

    # The internal topic exists, replicated on every broker, marked internal.
    _, topics = metadata_v1(cluster[0].bootstrap, ["__transaction_state"], full=True)
    err, parts = topics["__transaction_state"]
    assert err == 0 and len(parts) == 16, topics
    assert all(len(replicas) == 3 for _, replicas, _ in parts.values()), parts

    # Every broker names the same coordinator, which knows the producer.
    node = coordinator(cluster)
    pid, epoch, state, at = described(everyone)
    assert at == node and pid >= 0 and state == "Empty", (pid, epoch, state, at)

    dead = cluster[node // NODE_ID_STRIDE - 1]
    survivors = [b for b in cluster if b is not dead]
    dead._kill()
    t0 = time.monotonic()
    alive = ",".join(b.bootstrap for b in survivors)

    # A new instance inits through the survivors: same producer id, higher epoch.
    second = txn_producer(alive)
    second.init_transactions(CLIENT_TIMEOUT_S)
    took = time.monotonic() - t0
    new = wait_until("the survivors agree on a new coordinator", lambda: coordinator(survivors))
    assert new // NODE_ID_STRIDE != node // NODE_ID_STRIDE
    pid2, epoch2, state2, at2 = described(alive)
    assert (pid2, at2) == (pid, new), f"a new producer id {pid2} (was {pid}) or coordinator {at2}"
    assert epoch2 > epoch, f"epoch {epoch2} after {epoch}: the old instance is not fenced"
    assert listed(alive, new).get(TXN_ID) == pid

    # The old instance is fenced: its next transactional call fails fatally.
    first.begin_transaction()
    first.produce(TOPIC, b"zombie", partition=0)
    with pytest.raises(KafkaException) as fenced:
        first.commit_transaction(CLIENT_TIMEOUT_S)
    assert fenced.value.args[0].fatal(), fenced.value.args[0]

    # The new instance works on: a transaction of no records commits.
    second.begin_transaction()
    second.commit_transaction(CLIENT_TIMEOUT_S)

    # The killed broker comes back and agrees.
    dead.start()
    wait_until("every broker names the new coordinator", lambda: coordinator(cluster) == new)
    assert described(dead.bootstrap)[:2] == (pid, epoch2)
    print(f"coordinator {node} killed; the new instance was initialised by {new} "
          f"{took:.2f}s after the kill, producer id {pid} epoch {epoch} -> {epoch2}")


def test_an_open_transaction_waits_for_its_markers_after_the_coordinator_moves(cluster):
    """A transaction open on a partition of its coordinator's broker when that broker dies: the
    new coordinator, on another broker, cannot write that partition's abort marker yet
    (markers reach only the coordinator's own broker). It must keep the transaction
    PrepareAbort — fencing the old instance, the new instance's init waiting — rather than
    complete it without the marker, which would leave the partition a hanging transaction
    (its last stable offset held for good) once its broker is back."""
    everyone = ",".join(b.bootstrap for b in cluster)
    first = txn_producer(everyone)
    first.init_transactions(CLIENT_TIMEOUT_S)
    node = coordinator(cluster)
    broker = node // NODE_ID_STRIDE

    # A replication-factor-1 partition on the coordinator's broker (the only kind a
    # transaction can write in a cluster today).
    create(cluster[0].bootstrap, "local", 6, replication_factor=1)
    leaders = wait_until("leaders of local", lambda: (t := metadata_v1(cluster[0].bootstrap, ["local"])[1]["local"])
                         and t[0] == 0 and len(t[1]) == 6 and t[1])
    mine = [p for p, leader in leaders.items() if leader // NODE_ID_STRIDE == broker]
    if not mine:
        pytest.fail(f"no partition of 'local' on broker {broker}: {leaders}")
    first.begin_transaction()
    first.produce("local", b"open", partition=mine[0])
    assert first.flush(CLIENT_TIMEOUT_S) == 0
    pid, epoch, state, _ = described(everyone)
    assert state == "Ongoing", state

    dead = cluster[broker - 1]
    survivors = [b for b in cluster if b is not dead]
    dead._kill()
    alive = ",".join(b.bootstrap for b in survivors)

    # The new instance's init fences the old one (PrepareAbort at a higher epoch) but cannot
    # finish: it times out, and the transaction stays prepared with its partition.
    second = txn_producer(alive)
    with pytest.raises(KafkaException):
        second.init_transactions(8)
    pid2, epoch2, state2, at = described(alive)
    assert at // NODE_ID_STRIDE != broker
    assert (pid2, state2) == (pid, "PrepareAbort"), (pid2, state2)
    assert epoch2 == epoch + 1
