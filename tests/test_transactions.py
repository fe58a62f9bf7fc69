"""Kafka transactions (KIP-98) with real clients: commit, abort, isolation, fencing, timeouts, restarts.

A transactional producer (`transactional.id`) writes to several partitions and commits or aborts
them as one; the broker ends the transaction with a control record (marker) on every partition
it touched, and each marker takes an offset. What users see:

- read_committed consumers (librdkafka's default) see committed transactions only — never an
  aborted record, never a record of a transaction that is still open, and no record (from any
  producer) after the first offset of an open transaction until it ends: the last stable offset
  (LSO). ListOffsets "latest" with read_committed answers the LSO; read_uncommitted the high
  watermark. read_uncommitted consumers see every data record, aborted ones too.
- consume-transform-produce: offsets sent with the transaction (TxnOffsetCommit) become the
  group's committed offsets when it commits, and are dropped when it aborts.
- a second producer with the same transactional.id fences the first (its next call fails with a
  fatal error) and aborts what the first left open; a transaction open longer than the
  producer's transaction.timeout.ms is aborted by the broker; one asking for more than the
  broker's transaction.max.timeout.ms is refused.
- after a restart or a kill -9 a transaction left open still holds read_committed consumers back,
  and the next producer with its transactional.id aborts it; committed ones stay committed.

Clients: confluent-kafka (librdkafka) and kafka-python, on real sockets to the `weir` binary.
Before weir had transactions, every transactional producer failed at init_transactions.
"""

from __future__ import annotations

import time

import kafka
import kafka.errors
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from kafka.structs import OffsetAndMetadata

from clients import (Msg, Rec, kp_consumer, kp_producer, kp_rec, rd_conf, rd_consumer, rd_create_topic, rd_produce,
                     rd_producer, rd_rec, wait_for_topic)

# Client-side deadline of each transactional call (init, commit, abort, send offsets).
TXN_CALL_S = 10.0
READ_COMMITTED = {"isolation.level": "read_committed"}
READ_UNCOMMITTED = {"isolation.level": "read_uncommitted"}
# librdkafka reports every fencing error as _FENCED (fatal); a broker's own code may show through,
# and a call made once the client knows it is fenced fails with _FATAL.
FENCED = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH, KafkaError._FATAL}


# -- producing -------------------------------------------------------------------------------------


def txn_producer(bootstrap: str, txn_id: str, **conf) -> Producer:
    """A confluent-kafka transactional producer (idempotence on, acks=all; message.timeout.ms
    stays below the default transaction.timeout.ms of 60 s, as librdkafka requires)."""
    base = {"transactional.id": txn_id, "enable.idempotence": True, "acks": "all"}
    base.update(conf)
    return rd_producer(bootstrap, **base)


def txn_call(what: str, fn, *args):
    """A transactional API call that must succeed: an error fails the test naming the call."""
    try:
        return fn(*args)
    except KafkaException as e:
        raise AssertionError(f"{what} failed: {e.args[0]}") from e


def started(p: Producer) -> Producer:
    txn_call("init_transactions", p.init_transactions, TXN_CALL_S)
    return p


def records(prefix: str, partitions, per_partition: int) -> list[Msg]:
    """per_partition records on each partition, values "{prefix}-p{partition}-{i}"."""
    return [Msg(f"k{i}".encode(), f"{prefix}-p{p}-{i}".encode(), partition=p)
            for p in partitions for i in range(per_partition)]


def run_txn(p: Producer, topic: str, msgs: list[Msg], commit: bool) -> list[Msg]:
    """begin, produce (each record acknowledged), then commit or abort."""
    txn_call("begin_transaction", p.begin_transaction)
    rd_produce(p, topic, msgs)
    if commit:
        txn_call("commit_transaction", p.commit_transaction, TXN_CALL_S)
    else:
        txn_call("abort_transaction", p.abort_transaction, TXN_CALL_S)
    return msgs


def plain_produce(bootstrap: str, topic: str, msgs: list[Msg], **conf) -> None:
    rd_produce(rd_producer(bootstrap, acks="all", **conf), topic, msgs)


# -- consuming -------------------------------------------------------------------------------------


def isolation(committed: bool) -> dict:
    return READ_COMMITTED if committed else READ_UNCOMMITTED


def poll(c: Consumer, want: int, timeout: float, quiet: float = 0.0) -> list[Rec]:
    """Polls until `want` records came (or `timeout` passed: fewer are returned, for the caller's
    assertion to show which are missing), then `quiet` seconds more (anything extra is returned)."""
    out: list[Rec] = []
    deadline = time.monotonic() + timeout
    while len(out) < want and time.monotonic() < deadline:
        msg = c.poll(0.2)
        if msg is not None:
            assert msg.error() is None, f"consumer error: {msg.error()}"
            out.append(rd_rec(msg))
    end = time.monotonic() + quiet
    while time.monotonic() < end:
        msg = c.poll(0.2)
        if msg is not None:
            assert msg.error() is None, f"consumer error: {msg.error()}"
            out.append(rd_rec(msg))
    return out


def reader(bootstrap: str, topic: str, partitions, committed: bool) -> Consumer:
    """A librdkafka consumer assigned to the partitions from the beginning."""
    c = rd_consumer(bootstrap, **isolation(committed))
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    return c


def read_all(bootstrap: str, topic: str, partitions, want: int, committed: bool, quiet: float = 1.0) -> list[Rec]:
    """Everything a librdkafka consumer reads from the beginning: `want` records, then `quiet`
    seconds in which no more may come."""
    c = reader(bootstrap, topic, partitions, committed)
    try:
        return poll(c, want, timeout=15.0, quiet=quiet)
    finally:
        c.close()


def kp_read_all(bootstrap: str, topic: str, partitions, want: int, committed: bool,
                quiet: float = 1.0) -> list[Rec]:
    """The same with kafka-python."""
    c = kp_consumer(bootstrap, isolation_level="read_committed" if committed else "read_uncommitted")
    try:
        tps = [kafka.TopicPartition(topic, p) for p in partitions]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        out: list[Rec] = []
        deadline = time.monotonic() + 15.0
        while len(out) < want and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=200).values():
                out.extend(kp_rec(r) for r in recs)
        end = time.monotonic() + quiet
        while time.monotonic() < end:
            for recs in c.poll(timeout_ms=200).values():
                out.extend(kp_rec(r) for r in recs)
        return out
    finally:
        c.close()


def values(recs) -> dict[int, list[bytes]]:
    """{partition: [value, ...]} in the order read (records: Rec or Msg)."""
    out: dict[int, list[bytes]] = {}
    for r in recs:
        out.setdefault(r.partition, []).append(r.value)
    return out


def placed(recs: list[Rec]) -> dict[int, list[tuple[int, bytes]]]:
    """{partition: [(offset, value), ...]} in the order read."""
    out: dict[int, list[tuple[int, bytes]]] = {}
    for r in recs:
        out.setdefault(r.partition, []).append((r.offset, r.value))
    return out


def latest(bootstrap: str, topic: str, partitions, committed: bool) -> list[int]:
    """ListOffsets "latest" through librdkafka: the LSO for read_committed, the high watermark
    for read_uncommitted."""
    c = rd_consumer(bootstrap, **isolation(committed))
    try:
        return [c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1] for p in partitions]
    finally:
        c.close()


def kp_latest(bootstrap: str, topic: str, partitions, committed: bool) -> list[int]:
    """ListOffsets "latest" through kafka-python's end_offsets."""
    c = kp_consumer(bootstrap, isolation_level="read_committed" if committed else "read_uncommitted")
    try:
        tps = [kafka.TopicPartition(topic, p) for p in partitions]
        ends = c.end_offsets(tps, timeout_ms=10000)
        return [ends[tp] for tp in tps]
    finally:
        c.close()


# -- tests -----------------------------------------------------------------------------------------


@pytest.mark.timeout(90)
def test_read_committed_sees_committed_transactions_only(broker, topic_name):
    """Commit, abort, commit on 3 partitions: read_committed consumers (librdkafka and
    kafka-python) see the two committed transactions in order and nothing aborted, and end up
    positioned after the last marker; read_uncommitted sees the aborted records too; each
    transaction's marker takes one offset per partition."""
    b = broker.bootstrap
    parts = range(3)
    rd_create_topic(b, topic_name, 3)
    p = started(txn_producer(b, f"{topic_name}-tx"))
    first = run_txn(p, topic_name, records("commit1", parts, 3), commit=True)
    aborted = run_txn(p, topic_name, records("abort", parts, 2), commit=False)
    second = run_txn(p, topic_name, records("commit2", parts, 2), commit=True)

    # Per partition: commit1 at 0-2, marker 3, abort at 4-5, marker 6, commit2 at 7-8, marker 9.
    want = {q: [(o, v) for o, v in zip([0, 1, 2, 7, 8], values(first + second)[q])] for q in parts}
    c = reader(b, topic_name, parts, committed=True)
    try:
        got = poll(c, 15, timeout=15.0, quiet=1.0)
        positions = [tp.offset for tp in c.position([TopicPartition(topic_name, q) for q in parts])]
    finally:
        c.close()
    assert placed(got) == want, "a read_committed consumer must see exactly the committed records, " \
                                "at offsets that skip the aborted records and the markers"
    assert positions == [10, 10, 10], "a consumer that read everything is positioned after the last marker " \
                                      "(lag 0): fetch responses carry the control batches"
    got = kp_read_all(b, topic_name, parts, 15, committed=True)
    assert values(got) == values(first + second), "kafka-python read_committed: committed records only"

    everything = {q: [(o, v) for o, v in zip([0, 1, 2, 4, 5, 7, 8], values(first + aborted + second)[q])]
                  for q in parts}
    got = read_all(b, topic_name, parts, 21, committed=False)
    assert placed(got) == everything, "a read_uncommitted consumer sees aborted records too (but no markers)"

    assert latest(b, topic_name, parts, committed=False) == [10, 10, 10], \
        "high watermark: 7 data records + 3 markers per partition"
    assert latest(b, topic_name, parts, committed=True) == [10, 10, 10], \
        "no transaction is open: the last stable offset is the high watermark"


@pytest.mark.timeout(60)
def test_open_transaction_is_invisible_to_read_committed_until_it_commits(broker, topic_name):
    """Records of a transaction produced and flushed but not committed: read_committed consumers
    wait at its first offset (ListOffsets answers that LSO), read_uncommitted ones see them; the
    commit releases them to the waiting consumer."""
    b = broker.bootstrap
    rd_create_topic(b, topic_name, 1)
    before = [Msg(None, b"before-0", partition=0), Msg(None, b"before-1", partition=0)]
    plain_produce(b, topic_name, before)
    p = started(txn_producer(b, f"{topic_name}-tx"))
    txn_call("begin_transaction", p.begin_transaction)
    pending = records("open", [0], 3)
    rd_produce(p, topic_name, pending)  # offsets 2-4, acknowledged, not committed

    rc = reader(b, topic_name, [0], committed=True)
    try:
        got = poll(rc, 2, timeout=10.0, quiet=2.0)
        assert [r.value for r in got] == [b"before-0", b"before-1"], \
            "a read_committed consumer saw records of a transaction that is still open"
        got_kp = kp_read_all(b, topic_name, [0], 2, committed=True)
        assert [r.value for r in got_kp] == [b"before-0", b"before-1"], \
            "a kafka-python read_committed consumer saw records of a transaction that is still open"
        got_ru = read_all(b, topic_name, [0], 5, committed=False)
        assert [r.value for r in got_ru] == [m.value for m in before + pending], \
            "a read_uncommitted consumer sees the open transaction's records"

        assert latest(b, topic_name, [0], committed=True) == [2], \
            "ListOffsets(latest, read_committed) must be the open transaction's first offset (the LSO)"
        assert latest(b, topic_name, [0], committed=False) == [5], "ListOffsets(latest, read_uncommitted)"
        assert kp_latest(b, topic_name, [0], committed=True) == [2], "kafka-python end_offsets, read_committed"
        assert kp_latest(b, topic_name, [0], committed=False) == [5], "kafka-python end_offsets, read_uncommitted"

        txn_call("commit_transaction", p.commit_transaction, TXN_CALL_S)
        more = poll(rc, 3, timeout=10.0, quiet=1.0)
        assert [(r.offset, r.value) for r in more] == [(2 + i, m.value) for i, m in enumerate(pending)], \
            "after the commit the waiting read_committed consumer gets the transaction's records"
    finally:
        rc.close()
    assert latest(b, topic_name, [0], committed=True) == [6], "after the commit (marker at 5) the LSO is 6"
    assert kp_latest(b, topic_name, [0], committed=True) == [6]


@pytest.mark.timeout(60)
def test_records_behind_an_open_transaction_wait_for_it_and_an_abort_hides_it(broker, topic_name):
    """Kafka's LSO: an idempotent, non-transactional producer writes after a transaction began on
    the same partition; its records are acknowledged at once but read_committed consumers see
    them only when the transaction ends (here: aborts), and never the aborted records."""
    b = broker.bootstrap
    rd_create_topic(b, topic_name, 1)
    p = started(txn_producer(b, f"{topic_name}-tx"))
    txn_call("begin_transaction", p.begin_transaction)
    doomed = records("doomed", [0], 2)
    rd_produce(p, topic_name, doomed)  # offsets 0-1
    plain = [Msg(None, f"plain-{i}".encode(), partition=0) for i in range(3)]
    plain_produce(b, topic_name, plain, **{"enable.idempotence": True})  # offsets 2-4: acknowledged

    rc = reader(b, topic_name, [0], committed=True)
    try:
        early = poll(rc, 1, timeout=2.0)
        assert early == [], "read_committed consumers must not see past an open transaction's first " \
                            f"offset, saw {[(r.offset, r.value) for r in early]}"
        assert latest(b, topic_name, [0], committed=True) == [0], "LSO: the open transaction's first offset"
        assert latest(b, topic_name, [0], committed=False) == [5]
        got_ru = read_all(b, topic_name, [0], 5, committed=False)
        assert [r.value for r in got_ru] == [m.value for m in doomed + plain]

        txn_call("abort_transaction", p.abort_transaction, TXN_CALL_S)
        got = poll(rc, 3, timeout=10.0, quiet=1.0)
        assert [(r.offset, r.value) for r in got] == [(2, b"plain-0"), (3, b"plain-1"), (4, b"plain-2")], \
            "after the abort read_committed consumers get the records behind it, and none of the aborted ones"
    finally:
        rc.close()
    got = kp_read_all(b, topic_name, [0], 3, committed=True)
    assert [(r.offset, r.value) for r in got] == [(2, b"plain-0"), (3, b"plain-1"), (4, b"plain-2")], \
        "kafka-python read_committed after the abort"
    assert latest(b, topic_name, [0], committed=True) == [6], "abort marker at 5: the LSO is 6"


@pytest.mark.timeout(90)
def test_consume_transform_produce_commits_the_group_offsets_with_the_transaction(broker, topic_name):
    """The exactly-once loop: a subscribed read_committed consumer in group G, a transactional
    producer writing the transformed records and send_offsets_to_transaction(positions, group
    metadata). Committed: G's committed offsets are the positions. Aborted: they stay at the
    previous commit and the output (read_committed) has only the committed round."""
    b = broker.bootstrap
    inp, out = f"{topic_name}-in", f"{topic_name}-out"
    rd_create_topic(b, inp, 2)
    rd_create_topic(b, out, 1)
    plain_produce(b, inp, [Msg(f"k{i}".encode(), f"in-{i}".encode(), partition=i % 2) for i in range(10)])
    group = f"g-{topic_name}"
    c = Consumer(rd_conf(b, **{"group.id": group, "isolation.level": "read_committed",
                               "enable.auto.commit": False, "auto.offset.reset": "earliest",
                               "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
                               "fetch.wait.max.ms": 100}))
    inputs = [TopicPartition(inp, 0), TopicPartition(inp, 1)]

    def committed() -> dict[int, int]:
        return {tp.partition: tp.offset for tp in c.committed(inputs, timeout=10)}

    def transform(batch: list[Rec], commit: bool) -> tuple[list[bytes], dict[int, int]]:
        txn_call("begin_transaction", p.begin_transaction)
        outs = [Msg(r.key, b"out-" + r.value, partition=0) for r in batch]
        rd_produce(p, out, outs)
        positions = c.position(c.assignment())
        txn_call("send_offsets_to_transaction", p.send_offsets_to_transaction, positions,
                 c.consumer_group_metadata(), TXN_CALL_S)
        if commit:
            txn_call("commit_transaction", p.commit_transaction, TXN_CALL_S)
        else:
            txn_call("abort_transaction", p.abort_transaction, TXN_CALL_S)
        return [m.value for m in outs], {tp.partition: tp.offset for tp in positions}

    p = started(txn_producer(b, f"{topic_name}-tx"))
    c.subscribe([inp])
    try:
        batch = poll(c, 10, timeout=30.0)
        assert len(batch) == 10, f"the group consumer read {len(batch)} of 10 input records"
        first, pos1 = transform(batch, commit=True)
        assert pos1 == {0: 5, 1: 5}
        assert committed() == pos1, "the committed transaction's offsets are the group's committed offsets"

        plain_produce(b, inp, [Msg(f"k{i}".encode(), f"in-{i}".encode(), partition=i % 2) for i in range(10, 14)])
        batch = poll(c, 4, timeout=15.0)
        assert len(batch) == 4, f"the group consumer read {len(batch)} of 4 new input records"
        second, pos2 = transform(batch, commit=False)
        assert pos2 == {0: 7, 1: 7}
        assert committed() == pos1, "offsets sent with an aborted transaction must not be committed"
    finally:
        c.close()

    got = read_all(b, out, [0], 10, committed=True)
    assert [r.value for r in got] == first, "read_committed output: the committed round only"
    got = read_all(b, out, [0], 14, committed=False)
    assert [r.value for r in got] == first + second


@pytest.mark.timeout(60)
def test_a_consumer_waits_for_offsets_pending_in_an_open_transaction(broker, topic_name):
    """Offsets sent with a transaction that is still open are not the group's yet: a
    read_committed consumer joining the group (librdkafka asks OffsetFetch with require_stable)
    gets UNSTABLE_OFFSET_COMMIT for those partitions and waits — it neither starts from the old
    committed offset (it would consume twice what the transaction already covers) nor from the
    pending one (which may still be rolled back). Once the transaction commits it starts at the
    transaction's offsets."""
    b = broker.bootstrap
    rd_create_topic(b, topic_name, 1)
    plain_produce(b, topic_name, [Msg(None, f"r{i}".encode(), partition=0) for i in range(6)])
    group = f"g-{topic_name}"
    p = started(txn_producer(b, f"{topic_name}-tx"))
    txn_call("begin_transaction", p.begin_transaction)
    txn_call("send_offsets_to_transaction", p.send_offsets_to_transaction,
             [TopicPartition(topic_name, 0, 4)],
             Consumer(rd_conf(b, **{"group.id": group})).consumer_group_metadata(), TXN_CALL_S)
    c = Consumer(rd_conf(b, **{"group.id": group, "isolation.level": "read_committed",
                               "enable.auto.commit": False, "auto.offset.reset": "earliest",
                               "fetch.wait.max.ms": 100}))
    try:
        c.assign([TopicPartition(topic_name, 0)])  # committed offset: asked of the group
        early = poll(c, 1, timeout=3.0)
        assert early == [], f"consumed {[r.value for r in early]} while the group's offset was pending"
        txn_call("commit_transaction", p.commit_transaction, TXN_CALL_S)
        got = poll(c, 2, timeout=15.0, quiet=0.5)
        assert [r.value for r in got] == [b"r4", b"r5"], "starts at the committed transaction's offset"
    finally:
        c.close()


def test_second_producer_with_the_same_transactional_id_fences_the_first(broker, topic_name):
    """init_transactions of a new instance aborts the old instance's open transaction and fences
    it: the old one's next produce/commit fails with a fatal (fenced) error and its write is
    refused; the new one commits normally."""
    b = broker.bootstrap
    rd_create_topic(b, topic_name, 1)
    txn_id = f"{topic_name}-tx"
    old = started(txn_producer(b, txn_id))
    txn_call("begin_transaction", old.begin_transaction)
    orphaned = records("orphaned", [0], 3)
    rd_produce(old, topic_name, orphaned)  # offsets 0-2, left open

    new = started(txn_producer(b, txn_id))  # aborts the old transaction: marker at 3
    fresh = run_txn(new, topic_name, records("new", [0], 2), commit=True)  # 4-5, marker at 6

    # librdkafka raises the fatal error from flush (the refused produce) or else from the commit.
    try:
        old.produce(topic_name, value=b"zombie", partition=0)
        old.flush(TXN_CALL_S)
        old.commit_transaction(TXN_CALL_S)
    except KafkaException as e:
        err = e.args[0]
    else:
        raise AssertionError("the fenced producer's produce and commit succeeded: a second producer with "
                             "the same transactional.id did not fence the first")
    assert err.fatal() or err.code() in FENCED, f"the fenced producer must get a fatal fencing error, got {err}"
    with pytest.raises(KafkaException) as again:
        old.commit_transaction(TXN_CALL_S)
    assert again.value.args[0].fatal(), f"a fenced producer cannot commit any more: {again.value.args[0]}"

    got = read_all(b, topic_name, [0], 2, committed=True)
    assert [(r.offset, r.value) for r in got] == [(4, fresh[0].value), (5, fresh[1].value)], \
        "read_committed: the new instance's transaction only, nothing of the fenced one"
    got = read_all(b, topic_name, [0], 5, committed=False)
    assert [r.value for r in got] == [m.value for m in orphaned + fresh], \
        "the fenced producer's write after the fence must have been refused (it is not in the log)"


@pytest.mark.timeout(60)
def test_broker_aborts_a_transaction_open_longer_than_its_timeout(broker, topic_name):
    """transaction.timeout.ms=3000, produce, then nothing: after ~3 s the broker aborts the
    transaction, so the read_committed consumer waiting behind it moves on (a later plain record
    appears), its records never appear, and the producer's late commit fails."""
    b = broker.bootstrap
    rd_create_topic(b, topic_name, 1)
    p = started(txn_producer(b, f"{topic_name}-tx", **{"transaction.timeout.ms": 3000, "message.timeout.ms": 3000,
                                                      "socket.timeout.ms": 3000}))
    txn_call("begin_transaction", p.begin_transaction)
    t0 = time.monotonic()
    stale = records("stale", [0], 2)
    rd_produce(p, topic_name, stale)  # offsets 0-1
    plain_produce(b, topic_name, [Msg(None, b"plain", partition=0)])  # offset 2

    rc = reader(b, topic_name, [0], committed=True)
    try:
        early = poll(rc, 1, timeout=1.0)
        assert early == [], "the transaction was not open for its whole timeout: read_committed saw " \
                            f"{[(r.offset, r.value) for r in early]} within a second"
        got = poll(rc, 1, timeout=15.0)
        waited = time.monotonic() - t0
        got += poll(rc, 0, timeout=0.0, quiet=1.0)
        assert [(r.offset, r.value) for r in got] == [(2, b"plain")], \
            "a transaction open past its transaction.timeout.ms (3 s) must be aborted by the broker " \
            "within a few seconds, releasing the read_committed consumer waiting behind it"
        assert waited >= 2.9, f"the broker aborted the transaction after {waited:.1f} s, before its 3 s timeout"
    finally:
        rc.close()

    try:
        p.commit_transaction(TXN_CALL_S)
    except KafkaException as e:
        err = e.args[0]
        assert err.code() != KafkaError._TIMED_OUT, "the late commit got no answer, only a client timeout"
    else:
        raise AssertionError("committing a transaction the broker aborted on timeout succeeded")
    got = read_all(b, topic_name, [0], 3, committed=False)
    assert [r.value for r in got] == [m.value for m in stale] + [b"plain"]
    assert latest(b, topic_name, [0], committed=True) == [4], "abort marker at 3: the LSO is 4"


@pytest.mark.timeout(60)
def test_transaction_timeout_above_the_broker_maximum_is_refused(broker_factory, topic_name):
    """transaction.max.timeout.ms=5000: a producer asking for librdkafka's default 60 s gets
    INVALID_TRANSACTION_TIMEOUT at init_transactions; one asking for 5 s works."""
    broker = broker_factory(settings={"transaction.max.timeout.ms": 5000})
    b = broker.bootstrap
    rd_create_topic(b, topic_name, 1)
    greedy = txn_producer(b, f"{topic_name}-greedy")
    with pytest.raises(KafkaException) as e:
        greedy.init_transactions(TXN_CALL_S)
    assert e.value.args[0].code() == KafkaError.INVALID_TRANSACTION_TIMEOUT, \
        f"want INVALID_TRANSACTION_TIMEOUT, got {e.value.args[0]}"

    p = started(txn_producer(b, f"{topic_name}-ok", **{"transaction.timeout.ms": 5000, "message.timeout.ms": 5000,
                                                      "socket.timeout.ms": 5000}))
    sent = run_txn(p, topic_name, records("ok", [0], 2), commit=True)
    assert [r.value for r in read_all(b, topic_name, [0], 2, committed=True)] == [m.value for m in sent]


@pytest.mark.timeout(90)
def test_kafka_python_transactions_and_offsets(broker, topic_name):
    """kafka-python's KafkaProducer(transactional_id): a committed transaction with
    send_offsets_to_transaction (a standalone consumer: assign, group_id), an aborted one, and a
    committed one without offsets. Read_committed (kafka-python and librdkafka) sees the committed
    records only; the group's committed offset moves with the commit and not with the abort."""
    b = broker.bootstrap
    inp, out = f"{topic_name}-in", f"{topic_name}-out"
    rd_create_topic(b, inp, 1)
    rd_create_topic(b, out, 1)
    plain_produce(b, inp, [Msg(None, f"in-{i}".encode(), partition=0) for i in range(6)])
    tp = kafka.TopicPartition(inp, 0)
    c = kp_consumer(b, group_id=f"g-{topic_name}", isolation_level="read_committed")
    p = kp_producer(b, transactional_id=f"{topic_name}-kp", acks="all")

    def consume(n: int) -> list:
        got: list = []
        deadline = time.monotonic() + 15.0
        while len(got) < n and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=200, max_records=n - len(got)).values():
                got.extend(recs)
        assert len(got) == n, f"the input consumer read {len(got)} of {n} records"
        return got

    def transform(batch, commit: bool) -> list[bytes]:
        p.begin_transaction()
        outs = [b"out-" + r.value for r in batch]
        for v in outs:
            p.send(out, value=v, partition=0)
        p.flush(timeout=10)
        p.send_offsets_to_transaction({tp: OffsetAndMetadata(c.position(tp), "", -1)}, c.group_metadata())
        if commit:
            p.commit_transaction()
        else:
            p.abort_transaction()
        return outs

    try:
        try:
            p.init_transactions()
        except kafka.errors.KafkaError as e:
            raise AssertionError(f"kafka-python init_transactions failed: {e!r}") from e
        c.assign([tp])
        c.seek_to_beginning(tp)
        first = transform(consume(4), commit=True)
        assert c.committed(tp) == 4, "the committed transaction's offset is the group's committed offset"
        aborted = transform(consume(2), commit=False)
        assert c.position(tp) == 6
        assert c.committed(tp) == 4, "an offset sent with an aborted transaction must not be committed"
        p.begin_transaction()
        p.send(out, value=b"last", partition=0)
        p.commit_transaction()
    finally:
        p.close(timeout=5)
        c.close()

    want = first + [b"last"]
    assert [r.value for r in kp_read_all(b, out, [0], 5, committed=True)] == want, \
        "kafka-python read_committed: committed records only"
    assert [r.value for r in read_all(b, out, [0], 5, committed=True)] == want, "librdkafka read_committed"
    assert [r.value for r in kp_read_all(b, out, [0], 7, committed=False)] == first + aborted + [b"last"]


@pytest.mark.timeout(90)
@pytest.mark.parametrize("how", ["restart", "kill9"])
def test_transaction_state_survives_a_restart(broker, topic_name, how):
    """One transactional.id committed, another left a transaction open; the broker restarts
    (SIGTERM, or kill -9). The committed records are still visible, the open transaction still
    holds read_committed consumers back (it must not turn visible), and a new producer with its
    transactional.id aborts it at init_transactions; its own transaction then commits and the
    read_committed consumer reaches it."""
    parts = range(2)
    rd_create_topic(broker.bootstrap, topic_name, 2)
    t1 = started(txn_producer(broker.bootstrap, f"{topic_name}-t1"))
    done = run_txn(t1, topic_name, records("committed", parts, 2), commit=True)  # 0-1, marker 2
    t2 = started(txn_producer(broker.bootstrap, f"{topic_name}-t2"))
    txn_call("begin_transaction", t2.begin_transaction)
    left_open = records("left-open", parts, 2)
    rd_produce(t2, topic_name, left_open)  # 3-4, never committed

    getattr(broker, how)()  # the old producers keep pointing at the old port; they are not used again
    b = broker.bootstrap
    wait_for_topic(b, topic_name, 2)

    assert latest(b, topic_name, parts, committed=True) == [3, 3], \
        f"after the {how} the left-open transaction must still hold the LSO at its first offset"
    got = read_all(b, topic_name, parts, 4, committed=True, quiet=1.5)
    assert values(got) == values(done), \
        f"after the {how} read_committed must see the committed transaction and nothing of the open one"

    again = started(txn_producer(b, f"{topic_name}-t2"))  # aborts the left-open transaction: marker 5
    after = run_txn(again, topic_name, records("after", parts, 1), commit=True)  # 6, marker 7
    got = read_all(b, topic_name, parts, 6, committed=True)
    assert placed(got) == {q: [(0, v[0]), (1, v[1]), (6, values(after)[q][0])] for q, v in values(done).items()}, \
        "read_committed after re-initialising the transactional id: the committed records and the new " \
        "transaction; never the left-open records"
    got = read_all(b, topic_name, parts, 10, committed=False)
    assert values(got) == values(done + left_open + after)
    assert latest(b, topic_name, parts, committed=True) == [8, 8]
