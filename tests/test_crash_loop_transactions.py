"""Crash loop with a transactional producer: exactly-once transactions across kill -9.

One transactional.id runs transactions of K records each, spread over 3 partitions, one after
the other: begin, produce, flush (every record acknowledged), commit. A second thread kills the
broker (SIGKILL) at random moments — right after the producer called commit_transaction (while
the coordinator stores its decision and writes the markers), while it produces and flushes, or at
any time (during init_transactions too) — and restarts it at once on the same data dir and the
same fixed port (127.0.0.1:9092), which must be free again at once. After every kill the
application does what one that crashed with the broker would: it stops waiting for its producer
(a call still running is left to the old instance, a zombie), creates a new one with the same
transactional.id — whose init_transactions aborts what the old instance left open (or finishes a
commit the coordinator had already decided) and fences it — and retries the interrupted work
from scratch as a new transaction, unless its commit_transaction had returned. Each transaction
attempt ends up:

- committed: commit_transaction returned success (also a zombie's, late) — all K of its
  records must be visible to read_committed consumers, each exactly once;
- unknown: commit_transaction raised, or the kill came before it returned — the coordinator may
  have decided the commit before the kill, so the transaction is visible whole (K records, once
  each) or not at all, never in part;
- abandoned: commit_transaction was never called — nothing of it may be visible.

At the end (no transaction open) the read_committed end offset (the last stable offset) must
equal the high watermark on every partition, and one read_committed consumer reading every
partition from the start must find the above, no duplicate, no record nobody sent, and on each
partition the transactions in the order they ran, each one's records in the order produced.
A read_uncommitted consumer sees all of that and maybe aborted leftovers, each at most once.
A producer error with no kill since the producer was created fails the test.

CI runs WEIR_TXN_CRASH_CYCLES (default 50) kills; long mode e.g. WEIR_TXN_CRASH_CYCLES=300.
The seed is random unless WEIR_CRASH_SEED is given, and printed: it replays the kill moments
and record placement (the OS scheduling still varies).
"""

from __future__ import annotations

import collections
import os
import random
import threading
import time

import pytest
from confluent_kafka import KafkaException, TopicPartition

from clients import rd_consumer, rd_create_topic, rd_producer

PARTITIONS = 3
K = 8  # records per transaction
CYCLES = int(os.environ.get("WEIR_TXN_CRASH_CYCLES", "50"))
TXN_CALL_S = 15.0  # client deadline of init_transactions, flush and commit_transaction
TXN_OK_AFTER_LAST_KILL = 5  # transactions committed after the last kill before the final check
PRODUCER_CONF = {
    "enable.idempotence": True, "transaction.timeout.ms": 30000, "message.timeout.ms": 15000,
    "linger.ms": 1, "socket.timeout.ms": 5000,
    "reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 200, "retry.backoff.ms": 20,
}


class Killer(threading.Thread):
    """Kills the broker CYCLES times, each time at a moment chosen by the seeded RNG, and starts
    it again at once (broker.kill9). The producer loop reports its phase through `enter`."""

    def __init__(self, broker, rng: random.Random):
        super().__init__(daemon=True)
        self.broker = broker
        self.rng = rng
        self.cond = threading.Condition()
        self.phase = "init"
        self.entered = collections.Counter()  # phase -> times entered
        self.kills = 0  # incremented just before each kill
        self.restarts = 0  # incremented once the broker listens again
        self.at_kill = collections.Counter()  # "aim->phase": the producer loop's phase at each kill
        self.slowest_restart = 0.0  # seconds from the kill to listening again
        self.error: BaseException | None = None
        self.stop = threading.Event()

    def enter(self, phase: str) -> None:
        with self.cond:
            self.phase = phase
            self.entered[phase] += 1
            self.cond.notify_all()

    def wait_up(self) -> None:
        """Until the broker killed last listens again (or the killer failed)."""
        with self.cond:
            self.cond.wait_for(lambda: self.restarts == self.kills or self.error is not None
                               or not self.is_alive(), 60)

    def run(self) -> None:
        try:
            for _ in range(CYCLES):
                if self.stop.wait(self.rng.uniform(0.05, 0.3)):
                    return
                # A transaction takes a few milliseconds: produce + flush, then commit.
                aim = self.rng.choices(["commit", "produce", "any"], weights=[5, 3, 2])[0]
                if aim == "commit":
                    delay = self.rng.uniform(0.0, 0.003)
                elif aim == "produce":
                    delay = self.rng.uniform(0.0, 0.004)
                else:
                    delay = self.rng.uniform(0.0, 0.3)
                if aim != "any":
                    with self.cond:
                        seen = self.entered[aim]
                        if not self.cond.wait_for(lambda: self.entered[aim] > seen or self.stop.is_set(), 30):
                            raise AssertionError(f"the producer loop did not reach '{aim}' within 30 s "
                                                 f"(stuck in '{self.phase}')")
                if self.stop.wait(delay):
                    return
                self.broker.check_alive()
                self.kills += 1
                self.at_kill[f"{aim}->{self.phase}"] += 1
                t0 = time.monotonic()
                self.broker.kill9()  # SIGKILL, then start again on the same port and data dir
                self.slowest_restart = max(self.slowest_restart, time.monotonic() - t0)
                with self.cond:
                    self.restarts += 1
                    self.cond.notify_all()
        except BaseException as e:  # reported by the test's thread
            with self.cond:
                self.error = e
                self.cond.notify_all()


class Call(threading.Thread):
    """A blocking producer call (flush, commit_transaction) in a thread of its own, so that the
    application can stop waiting for it when the broker is killed."""

    def __init__(self, what: str, fn, *args):
        super().__init__(daemon=True)
        self.what = what
        self.fn = fn
        self.args = args
        self.result = None
        self.error = None  # the KafkaError (or other exception) it raised

    def run(self) -> None:
        try:
            self.result = self.fn(*self.args)
        except KafkaException as e:
            self.error = e.args[0]
        except Exception as e:  # noqa: BLE001 — a fatal error can surface wrapped (raised while logging)
            cause = e.__cause__ or e.__context__
            self.error = cause.args[0] if isinstance(cause, KafkaException) else e


def name(err) -> str:
    """A KafkaError's code name (e.g. _FENCED), else the error as text."""
    return err.name() if hasattr(err, "name") else str(err)


def value(t: int, job: int, i: int) -> bytes:
    return f"t{t}-j{job}-r{i}".encode()


def parse(v: bytes) -> tuple[int, int]:
    """(transaction attempt, record index) of a value."""
    t, _, i = v.decode().split("-")
    return int(t[1:]), int(i[1:])


def read_all(bootstrap: str, topic: str, ends: list[int], isolation: str) -> dict[int, list[tuple[int, bytes]]]:
    """Every record a consumer with this isolation level gets from offset 0 until its position
    reaches `ends` on every partition: {partition: [(offset, value), ...]}."""
    c = rd_consumer(bootstrap, **{"isolation.level": isolation, "fetch.wait.max.ms": 50})
    out: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 60
        while True:
            msg = c.poll(0.2)
            if msg is not None:
                assert msg.error() is None, f"{isolation} consumer error: {msg.error()}"
                out[msg.partition()].append((msg.offset(), msg.value()))
                continue
            positions = [tp.offset for tp in c.position(tps)]
            if all(pos >= end for pos, end in zip(positions, ends)):
                break
            assert time.monotonic() < deadline, \
                f"{isolation} consumer stuck at positions {positions}, the partitions end at {ends}"
    finally:
        c.close()
    return out


@pytest.mark.timeout(120 + CYCLES * 6)
def test_transactions_are_exactly_once_across_kills(broker_factory, topic_name):
    seed = int(os.environ.get("WEIR_CRASH_SEED", random.randrange(1 << 32)))
    print(f"transactional crash loop: seed {seed}, {CYCLES} kills (replay with WEIR_CRASH_SEED={seed})")
    place = random.Random(seed ^ 0x5EED)  # record placement (the producer loop's thread)
    broker = broker_factory(cores=2, fixed_port=True)
    rd_create_topic(broker.bootstrap, topic_name, PARTITIONS)
    txn_id = f"{topic_name}-tx"

    def fail(msg: str):
        pytest.fail(f"[seed {seed}] {msg}", pytrace=False)

    def killer_failed():
        """The kill or the restart failed (e.g. the broker did not listen again): the failure."""
        raise AssertionError(f"[seed {seed}] after {killer.kills} kills: {killer.error}") from killer.error

    # Attempt t: its job, its records {partition: [index, ...]} and its outcome.
    job_of: dict[int, int] = {}
    placement: dict[int, dict[int, list[int]]] = {}
    outcome: dict[int, str] = {}  # "committed" | "unknown" | "abandoned"
    late: set[int] = set()  # unknown outcomes whose commit_transaction returned success after all
    errors: collections.Counter = collections.Counter()  # what failed after kills, and how
    zombies: list[tuple[int, Call]] = []  # calls given up on at a kill, still running
    producers = 0

    def reap(wait: float = 0.0) -> None:
        """Calls given up on that returned since: a commit's success is an acknowledgement too."""
        for tt, z in list(zombies):
            z.join(wait)
            if z.is_alive():
                continue
            zombies.remove((tt, z))
            if z.error is not None:
                errors[f"zombie {z.what}:{name(z.error)}"] += 1
            elif z.what == "commit":
                late.add(tt)

    killer = Killer(broker, random.Random(seed))
    killer.start()
    producer = None
    producer_kills = -1  # killer.kills when the current producer was created

    def interrupted(call: Call) -> bool:
        """Runs `call`; True if the broker was killed before it returned (it keeps running)."""
        call.start()
        while call.is_alive() and killer.kills == producer_kills:
            call.join(0.002)
        return call.is_alive()

    def failed(t: int, what: str, err) -> None:
        """A call failed: fine after a kill (the job is retried), a broker problem otherwise."""
        if killer.error is not None:
            killer_failed()  # e.g. the broker did not come back: that is the failure to report
        if killer.kills == producer_kills:
            fail(f"transaction t{t}: {what} failed with the broker up (no kill since the producer was "
                 f"created): {err}")
        errors[f"{what}:{name(err)}"] += 1

    t = 0
    job = 0
    ok_after_last_kill = 0
    started = time.monotonic()
    try:
        while killer.is_alive() or ok_after_last_kill < TXN_OK_AFTER_LAST_KILL:
            if killer.error is not None:
                killer_failed()
            if time.monotonic() - started > 60 + CYCLES * 4:
                fail(f"the loop did not finish: {killer.kills} kills, {t} transactions, "
                     f"{ok_after_last_kill} committed since the last kill")
            reap()
            if producer is not None and producer_kills != killer.kills:
                # The broker was killed since this instance was created: start over, as an
                # application that crashed with it would. The old instance is dropped as it is
                # (no abort, no flush); the new one's init_transactions fences it.
                producer.purge()
                producer = None
                ok_after_last_kill = 0
            if producer is None:
                # The application starts again once the broker is back (librdkafka would
                # otherwise wait a second or so before asking again for its coordinator). A kill
                # from here on counts against this instance.
                producer_kills = killer.kills
                killer.wait_up()
                if killer.error is not None:
                    killer_failed()
                killer.enter("init")
                producer = rd_producer(broker.bootstrap, acks="all", **PRODUCER_CONF, **{"transactional.id": txn_id})
                producers += 1
                try:
                    producer.init_transactions(TXN_CALL_S)
                except KafkaException as e:
                    failed(t + 1, "init_transactions", e.args[0])
                    producer = None
                    continue

            t += 1
            job_of[t] = job
            parts: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
            placement[t] = parts
            outcome[t] = "abandoned"  # until commit_transaction is called
            try:
                killer.enter("produce")
                producer.begin_transaction()
                for i in range(K):
                    p = place.randrange(PARTITIONS)
                    parts[p].append(i)
                    producer.produce(topic_name, value=value(t, job, i), partition=p)
                producer.poll(0)
            except (KafkaException, BufferError) as e:
                failed(t, "begin/produce", e.args[0] if isinstance(e, KafkaException) else "BufferError")
                continue
            # Every record written (acknowledged) before the commit: a kill from here on leaves
            # a transaction open with its records in the log.
            flush = Call("flush", producer.flush, TXN_CALL_S)
            if interrupted(flush):
                zombies.append((t, flush))
                producer = None
                continue
            if flush.error is not None or flush.result:
                failed(t, "flush", flush.error or f"{flush.result} records undelivered after {TXN_CALL_S} s")
                continue
            if killer.kills != producer_kills:
                continue  # killed after the flush: not committed; the next instance aborts it
            killer.enter("commit")
            outcome[t] = "unknown"  # until commit_transaction returns
            commit = Call("commit", producer.commit_transaction, TXN_CALL_S)
            if interrupted(commit):
                # Killed during the commit and no answer yet. The old instance is left to
                # finish on its own (a zombie: the new one fences it), the job is retried.
                zombies.append((t, commit))
                producer = None
                continue
            killer.enter("idle")
            if commit.error is not None:
                failed(t, "commit", commit.error)
                continue
            outcome[t] = "committed"
            job += 1
            if not killer.is_alive():
                ok_after_last_kill += 1
    finally:
        killer.stop.set()
        with killer.cond:
            killer.cond.notify_all()
        killer.join(60)
        reap(TXN_CALL_S + 5)
    assert not killer.is_alive(), "the killer thread did not stop"
    if killer.error is not None:
        killer_failed()
    assert not zombies, "producer calls did not return within their timeout"
    assert killer.kills == CYCLES, f"{killer.kills} kills, want {CYCLES}"
    assert killer.slowest_restart < 10, \
        f"a restart after kill -9 took {killer.slowest_restart:.1f} s to listen again on the same port"
    broker.check_alive()
    if producer is not None:
        producer.close()

    # No transaction is open: read_committed's end (the LSO) is the high watermark.
    c = rd_consumer(broker.bootstrap, **{"isolation.level": "read_committed"})
    try:
        lso = [c.get_watermark_offsets(TopicPartition(topic_name, p), timeout=10, cached=False)[1]
               for p in range(PARTITIONS)]
    finally:
        c.close()
    c = rd_consumer(broker.bootstrap, **{"isolation.level": "read_uncommitted"})
    try:
        marks = [c.get_watermark_offsets(TopicPartition(topic_name, p), timeout=10, cached=False)
                 for p in range(PARTITIONS)]
    finally:
        c.close()
    hw = [high for _, high in marks]
    if lso != hw:
        fail(f"no transaction is open, yet the last stable offsets {lso} are not the high watermarks {hw}: "
             f"read_committed consumers are held back (outcomes: {collections.Counter(outcome.values())})")
    if any(low != 0 for low, _ in marks):
        fail(f"log start offsets {[low for low, _ in marks]}, want 0")

    committed_view = read_all(broker.bootstrap, topic_name, hw, "read_committed")
    seen: dict[int, dict[int, list[int]]] = collections.defaultdict(lambda: collections.defaultdict(list))
    for p, recs in committed_view.items():
        last = (0, -1)
        for offset, v in recs:
            try:
                tt, i = parse(v)
            except ValueError:
                fail(f"partition {p} offset {offset}: a record nobody sent: {v[:80]!r}")
            if tt not in placement or i not in placement[tt].get(p, []):
                fail(f"partition {p} offset {offset}: {v!r} was never sent to this partition")
            if (tt, i) <= last:
                what = "a duplicate" if (tt, i) == last or i in seen[tt][p] else "out of order"
                fail(f"partition {p} offset {offset}: {v!r} after t{last[0]} record {last[1]}: {what} "
                     f"(outcome of t{tt}: {outcome.get(tt)})")
            last = (tt, i)
            seen[tt][p].append(i)

    whole_unknown = 0
    for tt, out in outcome.items():
        got = {p: seen[tt].get(p, []) for p in range(PARTITIONS)}
        n = sum(map(len, got.values()))
        if out == "committed" and got != placement[tt]:
            fail(f"transaction t{tt} (job {job_of[tt]}) was committed (commit_transaction returned) but "
                 f"read_committed shows {got}, want {placement[tt]}")
        if tt in late and got != placement[tt]:
            fail(f"transaction t{tt}: commit_transaction, given up on at a kill, returned success later, "
                 f"but read_committed shows {got}, want {placement[tt]}")
        if out == "abandoned" and n:
            fail(f"transaction t{tt} was never committed (commit_transaction not called), yet read_committed "
                 f"shows {n} of its records: {got}")
        if out == "unknown" and n:
            if got != placement[tt]:
                fail(f"transaction t{tt}'s commit was interrupted by a kill; read_committed shows part of it: "
                     f"{got}, the whole is {placement[tt]}")
            whole_unknown += 1
    strays = sorted(set(seen) - set(outcome))
    if strays:
        fail(f"read_committed shows records of transactions that never ran: {strays[:5]}")

    # read_uncommitted: everything read_committed saw, plus maybe aborted records, each once.
    everything = read_all(broker.bootstrap, topic_name, hw, "read_uncommitted")
    for p in range(PARTITIONS):
        values_ru = [v for _, v in everything[p]]
        dups = [v for v, n in collections.Counter(values_ru).items() if n > 1]
        if dups:
            fail(f"partition {p}: read_uncommitted shows records more than once: {dups[:5]}")
        missing = set(v for _, v in committed_view[p]) - set(values_ru)
        if missing:
            fail(f"partition {p}: read_uncommitted misses records read_committed shows: {sorted(missing)[:5]}")
        if any(parse(v)[0] not in placement for v in values_ru):
            fail(f"partition {p}: read_uncommitted shows records nobody sent")

    counts = collections.Counter(outcome.values())
    n_committed = sum(len(r) for r in committed_view.values())
    n_all = sum(len(r) for r in everything.values())
    assert counts["committed"] > 0
    print(f"kills by aim->phase: {dict(killer.at_kill)}; errors after kills: {dict(errors)}")
    print(f"transactional crash loop done: seed {seed}, {killer.kills} kills, {producers} producer instances, "
          f"{len(outcome)} transactions: {counts['committed']} committed, {counts['unknown']} unknown outcomes "
          f"({whole_unknown} of them committed whole, {len(late)} acknowledged late), "
          f"{counts['abandoned']} abandoned; read_committed "
          f"{n_committed} records, read_uncommitted {n_all}, high watermarks {hw}; "
          f"slowest restart {killer.slowest_restart:.2f}s; {time.monotonic() - started:.0f}s")
