"""Kafka Streams 4.4.0 with processing.guarantee=exactly_once_v2 against weir, across kill -9.

The Streams application is tests/java/streams (weir.streams.EosApp), run as a `java`
subprocess: one application with two sub-topologies, each with a repartition topic (groupBy on
a new key) and a state store with a compacted changelog:

  (a) word count: lines -> words -> groupBy(word) -> count -> every update to the output topic
      (key = word, value = the count);
  (b) windowed aggregation: readings "category:amount" -> groupBy(category) -> 10 s tumbling
      windows -> count and sum -> every update to the output (key = "category@windowStart",
      value = "count:sum").

Record caches are off, so every update of a key is emitted. What "exactly once" means for
this output, and what the tests assert on everything read back with isolation.level =
read_committed:
  - per word, the committed counts are exactly 1, 2, ..., n where n is the word's true count
    computed here in Python from the lines sent: a repeated value means an input record was
    processed twice (or a transaction's output survived its abort), a gap means an update
    was lost, a value above n means double counting;
  - per (category, window), the committed counts are 1, 2, ..., n and the last sum equals the
    true sum of the amounts in that window;
  - no other keys.
The input is produced by an idempotent librdkafka producer at a steady rate while the
application runs, and the input topics are checked to hold every line exactly once (so a
wrong count is the application's pipeline, not the input).

The faults, one test each: the **broker** is killed with SIGKILL mid-stream and restarted on
the same port (Streams' producers, consumers and transactions ride through it); the **Streams
instance** is killed with SIGKILL mid-stream and a new one started on the same state directory
(same transactional.id: it fences the dead instance's producer, whose open transaction, if
any, weir aborts; restores its stores from the changelogs and goes on); and the same with the
new instance on an empty state directory (new transactional.ids: the dead one's open
transaction is aborted by weir's transaction timeout, the stores restored from scratch). Each
also checks the internal topics Streams created on weir: the store changelogs compacted (the
window store's compact,delete), the repartition topics delete
and purged by Streams (DeleteRecords: their log start offsets moved).

WEIR_STREAMS_FULL=1: four times the input, four kills of each kind, two stream threads.
"""

from __future__ import annotations

import collections
import os
import random
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from conftest import free_port_run
from confluent_kafka import TopicPartition

from clients import rd_admin, rd_consumer, rd_create_topic, rd_producer, rd_topic_configs
from java_support import classpath, java_cmd

FULL = os.environ.get("WEIR_STREAMS_FULL") == "1"
MAIN = "weir.streams.EosApp"
WORDS = [f"w{i:02d}" for i in range(23)]
CATEGORIES = [f"c{i}" for i in range(5)]
WINDOW_MS = 10_000
INPUT_PARTITIONS = 3
OUTPUT_PARTITIONS = 2
N_LINES = 2000 if FULL else 500
N_READINGS = 2000 if FULL else 500
PRODUCE_SECONDS = 30.0 if FULL else 8.0
KILLS = 4 if FULL else 1
THREADS = 2 if FULL else 1

pytestmark = pytest.mark.timeout(900 if FULL else 240)


class Input:
    """The records the test sends, and the truth computed from them."""

    def __init__(self, seed: int):
        rng = random.Random(seed)
        self.lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 8))) for _ in range(N_LINES)]
        t0 = (int(time.time() * 1000) - 600_000) // WINDOW_MS * WINDOW_MS
        self.readings = []  # (sensor, "category:amount", timestamp)
        for i in range(N_READINGS):
            self.readings.append((f"sensor-{rng.randrange(40)}", f"{rng.choice(CATEGORIES)}:{rng.randint(1, 1000)}",
                                  t0 + i * 97))
        self.word_counts = collections.Counter(w for line in self.lines for w in line.split())
        self.windows: dict[str, tuple[int, int]] = {}
        for _sensor, value, ts in self.readings:
            cat, amount = value.split(":")
            key = f"{cat}@{ts - ts % WINDOW_MS}"
            n, s = self.windows.get(key, (0, 0))
            self.windows[key] = (n + 1, s + int(amount))
        self.expected_word_updates = sum(self.word_counts.values())
        self.expected_window_updates = len(self.readings)


class App:
    """One Streams instance (a JVM) with its output in a log file."""

    def __init__(self, workdir: Path, bootstrap: str, app_id: str, prefix: str, state_dir: Path, n: int):
        self.log_path = workdir / f"streams-{n}.log"
        self._log = open(self.log_path, "ab", buffering=0)
        cmd = java_cmd() + ["-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                            "-Dorg.slf4j.simpleLogger.showDateTime=true",
                            "-cp", classpath("streams"), MAIN, bootstrap, app_id, prefix, str(state_dir)]
        env = dict(os.environ, WEIR_STREAMS_THREADS=str(THREADS))
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                                     env=env)

    def text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def tail(self, n: int = 6000) -> str:
        return f"--- {self.log_path} ---\n{self.text()[-n:]}"

    def wait_for(self, line: str, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if line in self.text():
                return
            assert self.proc.poll() is None, f"Streams app exited ({self.proc.returncode}) before '{line}'\n{self.tail()}"
            time.sleep(0.2)
        raise AssertionError(f"Streams app did not print '{line}' within {timeout}s\n{self.tail()}")

    def kill9(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        """SIGTERM: the shutdown hook closes Streams (commits the open transactions)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
                raise AssertionError(f"Streams app did not exit within 60s of SIGTERM\n{self.tail()}")
        self._log.close()


class Output:
    """A read_committed consumer of both output topics, polled in the test's own thread."""

    def __init__(self, bootstrap: str, prefix: str):
        self.topics = (f"{prefix}-word-counts", f"{prefix}-window-sums")
        self.consumer = rd_consumer(bootstrap, **{"isolation.level": "read_committed"})
        self.consumer.assign([TopicPartition(t, p, 0) for t in self.topics for p in range(OUTPUT_PARTITIONS)])
        self.records: dict[str, list] = {t: [] for t in self.topics}

    def poll(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            msg = self.consumer.poll(min(left, 0.5))
            if msg is None:
                continue
            if msg.error() is not None:
                # Transient while the broker restarts; anything fatal shows as missing output.
                continue
            self.records[msg.topic()].append((msg.partition(), msg.offset(), msg.key().decode(), msg.value().decode()))

    def counts(self) -> tuple[int, int]:
        return len(self.records[self.topics[0]]), len(self.records[self.topics[1]])

    def close(self) -> None:
        self.consumer.close()


def producer_thread(bootstrap: str, prefix: str, data: Input, errors: list) -> threading.Thread:
    """Sends the lines and readings at a steady rate over PRODUCE_SECONDS (idempotent, acks=all:
    it rides through a broker kill with every record exactly once)."""

    def run():
        try:
            p = rd_producer(bootstrap, **{"enable.idempotence": True, "acks": "all", "message.timeout.ms": 120000,
                                          "linger.ms": 20})
            steps = 40
            per_step_lines = (len(data.lines) + steps - 1) // steps
            per_step_readings = (len(data.readings) + steps - 1) // steps
            for i in range(steps):
                lines = data.lines[i * per_step_lines:(i + 1) * per_step_lines]
                readings = data.readings[i * per_step_readings:(i + 1) * per_step_readings]
                for j, line in enumerate(lines):
                    k = i * per_step_lines + j
                    p.produce(f"{prefix}-lines", key=f"line-{k}".encode(), value=line.encode())
                for sensor, value, ts in readings:
                    p.produce(f"{prefix}-readings", key=sensor.encode(), value=value.encode(), timestamp=ts)
                p.poll(0)
                time.sleep(PRODUCE_SECONDS / steps)
            left = p.flush(150)
            assert left == 0, f"{left} input records undelivered"
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)

    t = threading.Thread(target=run, name="input-producer", daemon=True)
    t.start()
    return t


def read_topic(bootstrap: str, topic: str, partitions: int, expect: int, timeout: float = 60.0) -> list:
    c = rd_consumer(bootstrap)
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out = []
        deadline = time.monotonic() + timeout
        idle_until = None
        while True:
            msg = c.poll(0.5)
            now = time.monotonic()
            if msg is not None and msg.error() is None:
                out.append(msg)
                idle_until = None
            elif len(out) >= expect:
                idle_until = idle_until or now + 1.0
                if now > idle_until:
                    return out
            assert now < deadline, f"{topic}: read {len(out)} of {expect} records within {timeout}s"
    finally:
        c.close()


def check_input(bootstrap: str, prefix: str, data: Input) -> None:
    lines = read_topic(bootstrap, f"{prefix}-lines", INPUT_PARTITIONS, len(data.lines))
    got = collections.Counter((m.key().decode(), m.value().decode()) for m in lines)
    want = collections.Counter((f"line-{k}", line) for k, line in enumerate(data.lines))
    assert got == want, (f"input topic {prefix}-lines: {sum((got - want).values())} extra, "
                         f"{sum((want - got).values())} missing records (the idempotent producer's input)")
    readings = read_topic(bootstrap, f"{prefix}-readings", INPUT_PARTITIONS, len(data.readings))
    got = collections.Counter((m.key().decode(), m.value().decode(), m.timestamp()[1]) for m in readings)
    assert got == collections.Counter(data.readings), f"input topic {prefix}-readings differs from what was sent"


def problems(out: Output, data: Input) -> list[str]:
    """Every way the committed output differs from exactly-once (empty when it is right)."""
    found = []
    per_word = collections.defaultdict(list)
    for _p, _o, key, value in sorted(out.records[out.topics[0]], key=lambda r: (r[0], r[1])):
        per_word[key].append(int(value))
    for word in sorted(set(per_word) | set(data.word_counts)):
        seq = per_word.get(word, [])
        want = list(range(1, data.word_counts.get(word, 0) + 1))
        if seq != want:
            dup = [v for v, c in collections.Counter(seq).items() if c > 1]
            gaps = sorted(set(want) - set(seq))
            over = [v for v in seq if v > len(want)]
            found.append(f"word {word!r}: {len(seq)} updates, want 1..{len(want)}; repeated {dup[:10]}, "
                         f"missing {gaps[:10]}, above the true count {over[:10]}; first {seq[:12]}")
    per_window = collections.defaultdict(list)
    for _p, _o, key, value in sorted(out.records[out.topics[1]], key=lambda r: (r[0], r[1])):
        n, s = value.split(":")
        per_window[key].append((int(n), int(s)))
    for key in sorted(set(per_window) | set(data.windows)):
        seq = per_window.get(key, [])
        n, total = data.windows.get(key, (0, 0))
        counts = [c for c, _ in seq]
        if counts != list(range(1, n + 1)):
            found.append(f"window {key}: counts {counts[:12]}{'...' if len(counts) > 12 else ''} "
                         f"({len(counts)} updates), want 1..{n}")
        elif seq and seq[-1][1] != total:
            found.append(f"window {key}: final sum {seq[-1][1]}, want {total}")
        elif any(b[1] <= a[1] for a, b in zip(seq, seq[1:])):
            found.append(f"window {key}: sums not increasing {[s for _, s in seq][:12]}")
    return found


def check_internal_topics(bootstrap: str, app_id: str) -> None:
    want = {f"{app_id}-word-counts-changelog": "compact", f"{app_id}-window-sums-changelog": "compact,delete",
            f"{app_id}-by-word-repartition": "delete", f"{app_id}-by-category-repartition": "delete"}
    listed = set(rd_admin(bootstrap).list_topics(timeout=10).topics)
    assert set(want) <= listed, f"internal topics missing: {sorted(set(want) - listed)}; have {sorted(listed)}"
    for topic, policy in want.items():
        got = rd_topic_configs(bootstrap, topic).get("cleanup.policy")
        assert got is not None and set(got.split(",")) == set(policy.split(",")), (
            f"{topic}: cleanup.policy={got!r}, want {policy!r}")
    # Streams purges its repartition topics (DeleteRecords up to what it committed, every
    # repartition.purge.interval.ms = 1 s here): their log start offsets moved.
    c = rd_consumer(bootstrap)
    try:
        for topic in (f"{app_id}-by-word-repartition", f"{app_id}-by-category-repartition"):
            marks = [c.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in range(INPUT_PARTITIONS)]
            assert sum(lo for lo, _hi in marks) > 0, f"{topic}: nothing purged, (low, high) per partition {marks}"
    finally:
        c.close()


def done(out: Output, data: Input) -> bool:
    w, s = out.counts()
    return w >= data.expected_word_updates and s >= data.expected_window_updates


def run_scenario(broker, workdir: Path, fault: str, seed: int, fresh_state: bool = False) -> None:
    prefix = f"eos-{fault}-{seed}"
    app_id = f"{prefix}-app"
    data = Input(seed)
    for t in (f"{prefix}-lines", f"{prefix}-readings"):
        rd_create_topic(broker.bootstrap, t, INPUT_PARTITIONS)
    for t in (f"{prefix}-word-counts", f"{prefix}-window-sums"):
        rd_create_topic(broker.bootstrap, t, OUTPUT_PARTITIONS)
    state_dir = workdir / "streams-state"
    apps = [App(workdir, broker.bootstrap, app_id, prefix, state_dir, 1)]
    out = Output(broker.bootstrap, prefix)
    errors: list = []
    try:
        apps[0].wait_for("STATE RUNNING")
        producer = producer_thread(broker.bootstrap, prefix, data, errors)
        total = data.expected_word_updates + data.expected_window_updates
        step = total // (KILLS + 2)
        last = 0  # committed output records seen at the previous fault
        for k in range(KILLS):
            # Mid-stream: part of the output committed, and (after an earlier fault) the
            # application has made progress again since then.
            threshold = min(max(step * (k + 1), last + step // 2), total - step // 4)
            deadline = time.monotonic() + 120
            while sum(out.counts()) < threshold:
                assert time.monotonic() < deadline, (
                    f"only {out.counts()} committed output records of {total} within 120s before kill {k + 1}\n"
                    f"{apps[-1].tail()}")
                out.poll(0.2)
            if fault == "broker":
                broker.kill9()
            else:
                apps[-1].kill9()
                if fresh_state:
                    state_dir = workdir / f"streams-state-{len(apps) + 1}"
                apps.append(App(workdir, broker.bootstrap, app_id, prefix, state_dir, len(apps) + 1))
            out.poll(0.5)
            last = sum(out.counts())
        producer.join(180)
        assert not producer.is_alive(), "input producer did not finish within 180s"
        assert not errors, f"input producer failed: {errors[0]!r}"
        deadline = time.monotonic() + 150
        while not done(out, data):
            if time.monotonic() > deadline:
                break
            out.poll(0.5)
            assert apps[-1].proc.poll() is None, f"Streams app exited ({apps[-1].proc.returncode})\n{apps[-1].tail()}"
        apps[-1].stop()
        out.poll(2.0)  # anything the clean close committed, and nothing else
        check_input(broker.bootstrap, prefix, data)
        found = problems(out, data)
        assert not found, (f"committed output is not exactly once ({len(found)} keys wrong; "
                           f"{out.counts()} records, want {data.expected_word_updates}, "
                           f"{data.expected_window_updates}):\n" + "\n".join(found[:25]) + "\n" + apps[-1].tail())
        w, s = out.counts()
        assert (w, s) == (data.expected_word_updates, data.expected_window_updates)
        check_internal_topics(broker.bootstrap, app_id)
    finally:
        out.close()
        for a in apps:
            if a.proc.poll() is None:
                a.kill9()


def test_streams_eos_survives_broker_kill9(broker_factory):
    """The broker is SIGKILLed mid-stream (and again with WEIR_STREAMS_FULL) and restarted on
    its port: the committed word counts and window aggregates are exactly once."""
    # A fixed port (and the per-core ports after it, one broker per core as by default): the
    # restarted broker is where the clients left it.
    port = free_port_run(3)
    broker = broker_factory(settings={"listeners": f"PLAINTEXT://127.0.0.1:{port}"}, cores=2)
    run_scenario(broker, broker.workdir, "broker", 1)
    assert broker.starts == 1 + KILLS


def test_streams_eos_survives_instance_kill9(broker):
    """The Streams JVM is SIGKILLed mid-stream and a new instance started on its state
    directory: it fences the old transactional producer (its open transaction is aborted),
    restores the stores from the changelogs, and the committed output is exactly once."""
    run_scenario(broker, broker.workdir, "instance", 2)


def test_streams_eos_survives_instance_kill9_on_a_new_machine(broker):
    """As above, but the new instance starts with an empty state directory (another machine):
    a new process id, so new transactional.ids that fence nothing; the dead instance's open
    transaction holds the last stable offset of its partitions until weir aborts it at its
    transaction.timeout.ms (10 s under exactly_once_v2), and the stores are restored from the
    changelogs from the beginning. The committed output is still exactly once."""
    run_scenario(broker, broker.workdir, "newmachine", 3, fresh_state=True)
