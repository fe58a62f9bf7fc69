"""Faults under load on replicated partitions, checked against the whole history
(docs/replication.md §7, step 4; the checker is tests/history.py).

`WEIR_FAULT_BROKERS` `weir serve` processes (3 in CI, up to 5; inter-broker traffic on
127.0.0.2-6, tests/cluster_net.py); a topic of 2 partitions replicated on every broker
(factor 3, or 5 with five brokers: every fault then hits a replica, and the groups are five
voters with a majority of three). Two librdkafka
acks=all producers write unique values for the whole run, one idempotent and one not, each
delivery report recorded (acknowledged offset or error); a librdkafka consumer reads both
partitions from offset 0 all along, each read recorded. Meanwhile, `WEIR_FAULT_CYCLES` rounds
(2 in CI) of: kill -9 of the broker leading partition 0, restarted once a survivor leads; a
SIGSTOP of the leading broker for 3 s (its followers elect another leader; it comes back as a
follower); a SIGSTOP of a follower for 3 s (it catches up). Then the producers stop, the
cluster heals, and every partition is read whole from offset 0. The checks: no acknowledged
record lost or moved, no divergence between reads of one offset, no read of a record that was
later cut, no consumer going backwards, no fatal error in either client, every replica holding
the same bytes, and no duplicate from the idempotent producer: its retries after a failover are
answered with the original's offsets (duplicates from the plain producer's retries are allowed,
and counted; so are the idempotent one's if it timed messages out, which makes librdkafka
re-send under a new epoch). Beside them a transactional producer writes to its own topic (every
fourth transaction aborted): at the end, read with read_committed, every transaction it was
told committed is there exactly once, every aborted one absent, and every one of unknown
outcome all there or absent. The figures printed (records acknowledged, failovers,
transactions) are for the report.
`WEIR_HISTORY_DUMP=path` pickles the whole history and the final logs there, to study a failure.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from confluent_kafka import KafkaException, Producer, TopicPartition

from clients import rd_conf, rd_consume, rd_consumer, rd_producer
from cluster_net import start_cluster
from conftest import close_brokers
from history import History
from test_cluster_metadata import NODE_ID_STRIDE, create
from test_cluster_replication import high_watermark, leader_of, same_batches_everywhere, stored_batches
from test_cluster_transactions import read_to_end

CYCLES = int(os.environ.get("WEIR_FAULT_CYCLES", "2"))
BROKERS = int(os.environ.get("WEIR_FAULT_BROKERS", "3"))
TOPIC = "faults"
PARTITIONS = 2


def producer_loop(hist: History, bootstrap: str, name: str, idempotent: bool, stop: threading.Event,
                  fatal: list, topic: str = TOPIC, partitions: int = PARTITIONS, acked_at: list | None = None):
    """Sends until `stop`, round robin over `partitions` partitions of `topic`. A fatal error
    of the client (librdkafka's idempotent producer gives up when the broker answers
    OUT_OF_ORDER_SEQUENCE_NUMBER) is recorded in `fatal` with its reason, and the application
    does what one must then: a new producer instance (a new producer id) carries on; the old
    instance's unanswered records stay of unknown outcome. `acked_at` gets (monotonic time,
    partition) of each acknowledgement (tests/test_cluster_rolling_restart.py measures the
    gaps)."""
    def report(err, msg):
        if err is None:
            hist.acknowledged(msg.value(), msg.offset())
            if acked_at is not None:
                acked_at.append((time.monotonic(), msg.partition()))
        else:
            hist.failed(msg.value(), str(err))

    def new_producer():
        # The idempotent producer gets a long message timeout, as librdkafka recommends: a
        # message that times out makes it bump its epoch and send what was in flight again
        # under new sequence numbers, which no broker can deduplicate (librdkafka's
        # INTRODUCTION.md, "Message timeout considerations").
        timeout_ms = 60000 if idempotent else 15000
        return rd_producer(bootstrap, acks="all", **{"enable.idempotence": idempotent,
                                                     "message.timeout.ms": timeout_ms, "linger.ms": 2})

    p = new_producer()
    i = 0
    while not stop.is_set():
        value = f"{name}-{i}".encode()
        part = i % partitions
        hist.attempt(part, value, idempotent)
        while True:
            try:
                p.produce(topic, value=value, partition=part, on_delivery=report)
                break
            except BufferError:
                p.poll(0.05)
            except KafkaException as e:
                reason = str(e)
                try:
                    p.poll(0.5)  # raises the fatal error with its reason
                except KafkaException as with_reason:
                    reason = str(with_reason)
                fatal.append(f"{name}: {reason}")
                p = new_producer()
        i += 1
        p.poll(0)
        time.sleep(0.002)
    left = p.flush(30)
    if left:
        hist.failed_to_flush(name, left)


def consumer_loop(hist: History, bootstrap: str, stop: threading.Event, errors: list,
                  topic: str = TOPIC, partitions: int = PARTITIONS):
    """Reads `topic`'s partitions from offset 0 until `stop`, each read recorded in `hist`
    (also used by tests/test_cluster_partitions.py)."""
    c = rd_consumer(bootstrap, **{"fetch.wait.max.ms": 50})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    try:
        while not stop.is_set():
            m = c.poll(0.1)
            if m is None:
                continue
            if m.error():
                errors.append(str(m.error()))
                continue
            hist.read("consumer", m.partition(), m.offset(), m.value())
    finally:
        c.close()


def consumer_reached(hist: History, ends: dict[int, int], timeout: float = 60.0) -> None:
    """Waits (up to `timeout`) until `consumer_loop` has read each partition p up to ends[p]."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with hist.lock:
            last = {}
            for p, off, _ in hist.reads.get("consumer", []):
                last[p] = off
        if all(last.get(p, -1) + 1 >= end for p, end in ends.items()):
            return
        time.sleep(0.2)


def read_whole(cluster, bootstrap: str, topic: str, ends: dict[int, int]) -> dict[int, list[bytes]]:
    """Every partition p of `topic` read from 0 to ends[p]: its values by offset (dense), each
    replica holding the same batches."""
    final = {}
    for p, end in ends.items():
        got = rd_consume(bootstrap, topic, [p], end)
        assert [r.offset for r in got] == list(range(end)), f"partition {p}: offsets not dense"
        final[p] = [r.value for r in got]
        same_batches_everywhere(cluster, topic, p, len(got))
    return final


TXN_TOPIC = "faults-txn"
TXN_RECORDS = 20  # per transaction, spread over PARTITIONS partitions


def txn_loop(bootstrap: str, stop: threading.Event, outcomes: dict, notes: list):
    """A transactional producer (docs/replication.md, "Transactions in a cluster") writing
    TXN_RECORDS unique values per transaction to TXN_TOPIC until `stop`, every fourth
    transaction aborted. `outcomes[n]` records what the client was told of transaction n:
    committed, aborted, or unknown (an error after which it could not tell). After an error a
    transaction that requires it is aborted; after a fatal one (or an abort that fails) a new
    instance with the same transactional.id takes over, which fences the old one and ends its
    open transaction."""
    def new_producer():
        while not stop.is_set():
            p = Producer(rd_conf(bootstrap, **{
                "transactional.id": "faults-writer", "enable.idempotence": True, "acks": "all",
                "linger.ms": 2, "message.timeout.ms": 30000, "transaction.timeout.ms": 60000}))
            try:
                p.init_transactions(30)
                return p
            except KafkaException as e:
                notes.append(f"init_transactions: {e.args[0]}")
        return None

    p = new_producer()
    n = 0
    while p is not None and not stop.is_set():
        commit = n % 4 != 3
        outcomes[n] = "unknown"
        try:
            p.begin_transaction()
            for i in range(TXN_RECORDS):
                p.produce(TXN_TOPIC, value=f"t{n}-{i}".encode(), partition=i % PARTITIONS)
            while True:
                try:
                    (p.commit_transaction if commit else p.abort_transaction)(30)
                    break
                except KafkaException as e:
                    if not e.args[0].retriable():
                        raise
                    notes.append(f"txn {n}: retried: {e.args[0]}")
            outcomes[n] = "committed" if commit else "aborted"
        except KafkaException as e:
            err = e.args[0]
            notes.append(f"txn {n}: {err}")
            replace = err.fatal()
            if err.txn_requires_abort():
                try:
                    p.abort_transaction(30)
                    outcomes[n] = "aborted"
                except KafkaException as e2:
                    notes.append(f"txn {n}: abort failed: {e2.args[0]}")
                    replace = True
            elif not err.fatal():
                replace = True  # the state is unclear: a new instance ends whatever is open
            if replace:
                p = new_producer()
        n += 1


def check_transactions(bootstrap: str, outcomes: dict) -> dict:
    """Reads TXN_TOPIC whole with read_committed and checks every transaction against what its
    producer was told: a committed one has every record exactly once, an aborted one none, one
    of unknown outcome all or none (atomicity), and no record appears twice. The counts."""
    seen: dict[bytes, int] = {}
    for values in read_to_end(bootstrap, TXN_TOPIC, "read_committed", PARTITIONS, timeout=60).values():
        for v in values:
            seen[v] = seen.get(v, 0) + 1
    twice = [v for v, k in seen.items() if k > 1]
    assert not twice, f"transactional records read twice: {twice[:5]}"
    counts = {"committed": 0, "aborted": 0, "unknown committed": 0, "unknown aborted": 0}
    for n, outcome in outcomes.items():
        present = sum(f"t{n}-{i}".encode() in seen for i in range(TXN_RECORDS))
        if outcome == "committed":
            assert present == TXN_RECORDS, f"committed transaction {n}: {present} of {TXN_RECORDS} records"
        elif outcome == "aborted":
            assert present == 0, f"aborted transaction {n}: {present} records visible"
        else:
            assert present in (0, TXN_RECORDS), f"transaction {n} half visible: {present} of {TXN_RECORDS}"
        counts[outcome if outcome != "unknown" else f"unknown {'committed' if present else 'aborted'}"] += 1
    known = {f"t{n}-{i}".encode() for n in outcomes for i in range(TXN_RECORDS)}
    assert set(seen) <= known, f"records no transaction sent: {sorted(set(seen) - known)[:5]}"
    return counts


@pytest.fixture
def cluster(request):
    """`BROKERS` brokers, ids 1..BROKERS, inter-broker traffic on 127.0.0.2-6."""
    try:
        yield start_cluster(request, BROKERS, own_addresses=True)
    finally:
        close_brokers(request, getattr(request.node, "_weir_brokers", []))


def broker_of(cluster, node: int):
    return cluster[node // NODE_ID_STRIDE - 1]


@pytest.mark.timeout(300 + 120 * CYCLES)
def test_faults_under_load_lose_nothing_acknowledged(cluster, request):
    everyone = ",".join(b.bootstrap for b in cluster)
    create(cluster[0].bootstrap, TOPIC, PARTITIONS, replication_factor=BROKERS)
    create(cluster[0].bootstrap, TXN_TOPIC, PARTITIONS, replication_factor=BROKERS)
    for p in range(PARTITIONS):
        leader_of(cluster, TXN_TOPIC, p)
    leader, epoch = leader_of(cluster, TOPIC, 0)
    hist = History()
    stop_producers, stop_consumer = threading.Event(), threading.Event()
    consumer_errors: list[str] = []
    fatal: list[str] = []
    txn_outcomes: dict[int, str] = {}
    txn_notes: list[str] = []
    # Daemon threads: a failed check must not leave pytest waiting on the consumer forever.
    threads = [threading.Thread(target=producer_loop, args=(hist, everyone, "idem", True, stop_producers, fatal),
                                daemon=True),
               threading.Thread(target=producer_loop, args=(hist, everyone, "plain", False, stop_producers, fatal),
                                daemon=True),
               threading.Thread(target=txn_loop, args=(everyone, stop_producers, txn_outcomes, txn_notes),
                                daemon=True),
               threading.Thread(target=consumer_loop, args=(hist, everyone, stop_consumer, consumer_errors),
                                daemon=True)]
    # A failed check must not leave the clients running (pytest would never exit).
    request.addfinalizer(lambda: (stop_producers.set(), stop_consumer.set()))
    for t in threads:
        t.start()
    events = []
    try:
        time.sleep(2)
        for cycle in range(CYCLES):
            # kill -9 of the leader's broker; a survivor takes over; the dead one restarts.
            dead = broker_of(cluster, leader)
            survivors = [b for b in cluster if b is not dead]
            dead._kill()
            t0 = time.monotonic()
            leader, epoch = leader_of(survivors, TOPIC, 0, epoch + 1)
            events.append(f"cycle {cycle}: kill -9 of broker {cluster.index(dead) + 1}, "
                          f"new leader {leader} at epoch {epoch} after {time.monotonic() - t0:.2f}s")
            time.sleep(1)
            dead.start()
            time.sleep(2)
            # SIGSTOP of the leader's broker for 3 s: the others elect a leader meanwhile.
            frozen = broker_of(cluster, leader)
            frozen.proc.send_signal(signal.SIGSTOP)
            t0 = time.monotonic()
            others = [b for b in cluster if b is not frozen]
            try:
                leader, epoch = leader_of(others, TOPIC, 0, epoch + 1)
                events.append(f"cycle {cycle}: SIGSTOP of broker {cluster.index(frozen) + 1}, "
                              f"new leader {leader} at epoch {epoch} after {time.monotonic() - t0:.2f}s")
            finally:
                time.sleep(max(0.0, 3 - (time.monotonic() - t0)))
                frozen.proc.send_signal(signal.SIGCONT)
            time.sleep(2)
            # SIGSTOP of a follower for 3 s: nothing visible to clients; it catches up after.
            follower = next(b for b in cluster if b is not broker_of(cluster, leader))
            follower.proc.send_signal(signal.SIGSTOP)
            time.sleep(3)
            follower.proc.send_signal(signal.SIGCONT)
            events.append(f"cycle {cycle}: SIGSTOP of follower broker {cluster.index(follower) + 1} for 3 s")
            time.sleep(2)
    finally:
        for b in cluster:
            if b.proc is not None and b.proc.poll() is None:
                b.proc.send_signal(signal.SIGCONT)
        stop_producers.set()
        for t in threads[:3]:
            t.join(60)

    # Healed: the consumer reads to the end, then every partition is read whole. (A restarted
    # broker listens on a new port: after three cycles none of the first addresses is left.)
    everyone = ",".join(b.bootstrap for b in cluster)
    ends = {p: high_watermark(everyone, TOPIC, p) for p in range(PARTITIONS)}
    consumer_reached(hist, ends)
    stop_consumer.set()
    threads[3].join(30)
    final = read_whole(cluster, everyone, TOPIC, ends)

    found = hist.check(final)
    if os.environ.get("WEIR_HISTORY_DUMP"):
        import pickle
        with open(os.environ["WEIR_HISTORY_DUMP"], "wb") as f:
            pickle.dump({"attempts": hist.attempts, "reads": hist.reads, "final": final, "found": found,
                         "fatal": fatal, "events": events}, f)
    acked = hist.acked()
    failed = [a for a in hist.attempts.values() if a.error is not None]
    reads = len(hist.reads.get("consumer", []))
    print("\n" + "\n".join(events))
    unknown = [a for a in hist.attempts.values() if a.offset is None and a.error is None]
    print(f"unknown outcome: {len(unknown)} (idempotent {sum(a.idempotent for a in unknown)}); "
          f"left in a producer's queue after its flush: {hist.unflushed}")
    print(f"{len(hist.attempts)} records sent, {len(acked)} acknowledged, {len(failed)} failed "
          f"({sorted({a.error for a in failed})[:3]}); final log {sum(map(len, final.values()))} records; "
          f"{reads} reads by the consumer; consumer errors {consumer_errors[:3]}; "
          f"duplicates from the non-idempotent producer's retries: {len(found['duplicate'])}")
    txns = check_transactions(everyone, txn_outcomes)
    print(f"transactions: {txns}; the transactional client's errors: {len(txn_notes)}, e.g. {txn_notes[:3]}")
    assert txns["committed"] > 5, "the transactional producer got almost nothing through"
    assert not fatal, f"a producer hit a fatal error: {fatal}"
    # Duplicates from the idempotent producer are a broker bug unless it timed messages out
    # (then librdkafka itself re-sent under a new epoch, see producer_loop).
    idem_timeouts = [a for a in failed if a.idempotent and "TIMED_OUT" in (a.error or "")]
    print(f"idempotent producer: {len(idem_timeouts)} messages timed out, "
          f"{len(found['duplicate_idempotent'])} duplicates")
    kinds = ["lost", "divergence", "read_uncommitted", "non_monotonic", "unknown_value"]
    if not idem_timeouts:
        kinds.append("duplicate_idempotent")
    for kind in kinds:
        assert not found[kind], f"{kind}: {len(found[kind])}, e.g. {found[kind][:5]}"
    assert len(acked) > 100, "the producers got almost nothing through"
    for p in range(PARTITIONS):
        copies = {stored_batches(b.data_dir, TOPIC, p) for b in cluster}
        assert len(copies) == 1, f"partition {p}: replicas differ"
