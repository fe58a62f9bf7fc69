"""Kafka Connect (a distributed worker) and MirrorMaker 2 against weir.

The worker and MirrorMaker are Kafka's own, from the class path of tests/java/connect, run as
`java` subprocesses: Kafka 4.3.1 (connect-runtime, connect-file, connect-mirror, kafka-clients),
not 4.4.0, because connect-file and connect-mirror 4.4.0 are not on Maven Central and the 4.3.1
plugins do not load on 4.4.0's kafka-clients (see tests/java/connect/pom.xml).

Connect: `ConnectDistributed` with its config, offset and status topics on weir (the worker
creates them; they must be compacted there), a FileStreamSource -> topic -> FileStreamSink
pipeline POSTed to its REST API, and a stop / start of the worker in the middle. What is
asserted about delivery: FileStreamSink is at-least-once in general (a sink task that dies
between writing the file and committing its consumer offsets writes those records again).
Here the worker is stopped gracefully (SIGTERM): it commits the source task's file position
to the offsets topic and the sink task's consumer offsets (after flushing the file) before it
exits, so every line must reach the sink file exactly once and in order — a line written
twice means the worker lost what it committed to weir (a source position in the compacted
offsets topic, or a group's committed offset), a missing line that weir lost a record.

Exactly-once source (KIP-618, exactly.once.source.support=enabled): FileStreamSource writes
each poll's lines and its file position in one transaction; the worker is killed with SIGKILL
while copying and a new one started: read_committed, every line exactly once, in order.

MirrorMaker 2: `org.apache.kafka.connect.mirror.MirrorMaker` with an mm2.properties naming two
weir brokers, A -> B, copying one topic and one consumer group's committed offsets
(sync.group.offsets.enabled, emit.checkpoints.interval.seconds=1): B gets `A.<topic>` with
every record (same partition, same order, keys, values, headers) and the topic's config, and
the group's committed offsets translated onto B; then, with MirrorMaker running, more records
and a new commit of the group on A follow onto B.

WEIR_STREAMS_FULL=1: four worker kills in the exactly-once source test.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition

from clients import (Msg, rd_admin, rd_consume, rd_consumer, rd_create_topic, rd_produce, rd_producer,
                     rd_topic_configs)
from java_support import classpath, java_cmd

FULL = os.environ.get("WEIR_STREAMS_FULL") == "1"
KILLS = 4 if FULL else 1  # worker kills in the exactly-once source test

pytestmark = pytest.mark.timeout(600 if FULL else 300)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Jvm:
    """A Connect worker or MirrorMaker process, output in a log file."""

    def __init__(self, log_path: Path, main: str, *args: str):
        self.log_path = log_path
        self._log = open(log_path, "ab", buffering=0)
        self._log.write(f"===== start {main} {' '.join(args)}\n".encode())
        cmd = java_cmd() + ["-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                            "-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
                            "-Dorg.slf4j.simpleLogger.showDateTime=true",
                            "-Dorg.slf4j.simpleLogger.log.org.apache.kafka.clients=" + os.environ.get(
                                "WEIR_CONNECT_CLIENT_LOG", "warn"),
                            "-Dorg.slf4j.simpleLogger.log.org.apache.kafka.common=warn",
                            "-Dorg.slf4j.simpleLogger.log.org.eclipse.jetty=warn",
                            "-Dorg.slf4j.simpleLogger.log.org.glassfish=warn",
                            "-Dorg.slf4j.simpleLogger.log.org.reflections=warn",
                            "-cp", classpath("connect"), main, *args]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT)

    def tail(self, n: int = 8000) -> str:
        text = self.log_path.read_text(errors="replace")
        return f"--- {self.log_path} ---\n{text[-n:]}"

    def thread_dump(self) -> str:
        """jstack of the JVM (appended to its log too), for a hang's report."""
        jstack = shutil.which("jstack")
        if jstack is None or self.proc.poll() is not None:
            return "(no thread dump: jstack missing or JVM gone)"
        try:
            out = subprocess.run([jstack, str(self.proc.pid)], capture_output=True, text=True, timeout=60).stdout
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"(jstack failed: {e})"
        self._log.write(b"===== jstack\n" + out.encode())
        return out

    def check_alive(self) -> None:
        assert self.proc.poll() is None, f"{self.log_path.name}: JVM exited with {self.proc.returncode}\n{self.tail()}"

    def stop(self, timeout: float = 60.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
                raise AssertionError(f"JVM did not exit within {timeout}s of SIGTERM\n{self.tail()}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
        self._log.close()


def http(method: str, url: str, body: dict | None = None, timeout: float = 10.0):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json",
                                                                          "Accept": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        raw = resp.read()
        return resp.status, (json.loads(raw) if raw else None)


def wait_until(what: str, check, timeout: float, jvm: Jvm | None = None, interval: float = 0.5):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        if jvm is not None:
            jvm.check_alive()
        try:
            last = check()
            if last:
                return last
        except (OSError, urllib.error.URLError, ValueError) as e:
            last = e
        time.sleep(interval)
    if jvm is not None:
        jvm.thread_dump()  # into its log, kept with the failed test's directory
    raise AssertionError(f"{what}: not within {timeout}s (last: {last!r})" + (f"\n{jvm.tail()}" if jvm else ""))


# -- Connect ---------------------------------------------------------------------------------------


def worker_properties(path: Path, bootstrap: str, rest_port: int, prefix: str, *extra: str) -> None:
    path.write_text("\n".join([*extra,
        f"bootstrap.servers={bootstrap}",
        f"group.id={prefix}-cluster",
        "key.converter=org.apache.kafka.connect.storage.StringConverter",
        "value.converter=org.apache.kafka.connect.storage.StringConverter",
        f"config.storage.topic={prefix}-configs",
        f"offset.storage.topic={prefix}-offsets",
        f"status.storage.topic={prefix}-status",
        "config.storage.replication.factor=1",
        "offset.storage.replication.factor=1",
        "status.storage.replication.factor=1",
        "offset.storage.partitions=5",
        "status.storage.partitions=2",
        "offset.flush.interval.ms=500",
        f"listeners=http://127.0.0.1:{rest_port}",
        "rest.advertised.host.name=127.0.0.1",
        f"rest.advertised.port={rest_port}",
        "scheduled.rebalance.max.delay.ms=1000",
        "session.timeout.ms=10000",
        "heartbeat.interval.ms=1000",
        "",
    ]))


def wait_worker_ready(base: str, worker: Jvm) -> None:
    """The REST server answers GET / as soon as it starts; /connectors only once the herder has
    started (read its config topic, joined the group): 503 until then."""
    wait_until("Connect worker ready (GET /connectors)", lambda: http("GET", base + "/connectors")[0] == 200, 120,
               worker)


def running(base: str, name: str) -> bool:
    _, st = http("GET", f"{base}/connectors/{name}/status")
    return st["connector"]["state"] == "RUNNING" and len(st["tasks"]) == 1 and st["tasks"][0]["state"] == "RUNNING"


def append_lines(path: Path, lines: list[str]) -> None:
    with open(path, "a") as f:
        for line in lines:
            f.write(line + "\n")


def sink_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_connect_file_pipeline_survives_worker_restart(broker, tmp_path):
    prefix = "connect-" + os.urandom(3).hex()
    topic = f"{prefix}-lines"
    source, sink = tmp_path / "source.txt", tmp_path / "sink.txt"
    source.write_text("")
    props = tmp_path / "worker.properties"
    rest_port = free_port()
    worker_properties(props, broker.bootstrap, rest_port, prefix)
    base = f"http://127.0.0.1:{rest_port}"
    log = broker.workdir / "connect-worker.log"
    worker = Jvm(log, "org.apache.kafka.connect.cli.ConnectDistributed", str(props))
    try:
        wait_worker_ready(base, worker)
        # The worker created its three topics, compacted, as Kafka requires of them.
        internal = (f"{prefix}-configs", f"{prefix}-offsets", f"{prefix}-status")
        wait_until("the worker's topics", lambda: set(internal) <= set(rd_admin(broker.bootstrap).list_topics(
            timeout=5).topics), 60, worker)
        for t in internal:
            assert rd_topic_configs(broker.bootstrap, t).get("cleanup.policy") == "compact", t
        plugins = {p["class"] for p in http("GET", base + "/connector-plugins")[1]}
        assert {"org.apache.kafka.connect.file.FileStreamSourceConnector",
                "org.apache.kafka.connect.file.FileStreamSinkConnector"} <= plugins, plugins

        status, _ = http("POST", base + "/connectors", {"name": "file-source", "config": {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
            "tasks.max": "1", "file": str(source), "topic": topic}}, timeout=60)
        assert status == 201
        status, _ = http("POST", base + "/connectors", {"name": "file-sink", "config": {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector",
            "tasks.max": "1", "file": str(sink), "topics": topic}}, timeout=60)
        assert status == 201
        wait_until("both connectors RUNNING", lambda: running(base, "file-source") and running(base, "file-sink"),
                   90, worker)

        want = [f"line {i} before the restart" for i in range(200)]
        append_lines(source, want[:100])
        time.sleep(0.3)
        append_lines(source, want[100:])
        wait_until("200 lines in the sink file", lambda: len(sink_lines(sink)) >= len(want), 90, worker)

        # Stop the worker (graceful), write while it is down, start a new one on the same topics.
        worker.stop()
        worker.kill()
        more = [f"line {i} while the worker was down" for i in range(150)]
        append_lines(source, more)
        worker = Jvm(log, "org.apache.kafka.connect.cli.ConnectDistributed", str(props))
        wait_worker_ready(base, worker)
        wait_until("connectors restored from the config topic",
                   lambda: sorted(http("GET", base + "/connectors")[1]) == ["file-sink", "file-source"], 60, worker)
        wait_until("both connectors RUNNING after the restart",
                   lambda: running(base, "file-source") and running(base, "file-sink"), 90, worker)
        after = [f"line {i} after the restart" for i in range(100)]
        append_lines(source, after)
        want += more + after
        wait_until(f"{len(want)} lines in the sink file", lambda: len(sink_lines(sink)) >= len(want), 90, worker)
        time.sleep(3)  # offset.flush.interval.ms is 500: a duplicate would be there by now
        got = sink_lines(sink)
        assert got == want, (f"sink file: {len(got)} lines, want {len(want)} exactly once in order; "
                             f"first difference at line "
                             f"{next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))}")
        # And the topic holds each line once.
        recs = rd_consume(broker.bootstrap, topic, [0], len(want), extra_wait=1.0)
        assert [r.value.decode() for r in recs] == want
    finally:
        worker.stop()
        worker.kill()


def test_connect_exactly_once_source_survives_worker_kill9(broker, tmp_path):
    """KIP-618: a worker with exactly.once.source.support=enabled runs FileStreamSource with
    exactly.once.support=required: each poll's records and the file position go to weir in one
    transaction (the task's transactional producer; the leader fences the previous generation's
    producers). The worker is killed with SIGKILL while lines are being copied and a new one
    started: read_committed, the topic holds every line exactly once, in order (without
    transactions the records sent after the last offset flush would be sent again)."""
    prefix = "connect-eos-" + os.urandom(3).hex()
    topic = f"{prefix}-lines"
    source = tmp_path / "source.txt"
    source.write_text("")
    props = tmp_path / "worker.properties"
    rest_port = free_port()
    worker_properties(props, broker.bootstrap, rest_port, prefix, "exactly.once.source.support=enabled")
    base = f"http://127.0.0.1:{rest_port}"
    log = broker.workdir / "connect-worker.log"
    rd_create_topic(broker.bootstrap, topic, 1)
    worker = Jvm(log, "org.apache.kafka.connect.cli.ConnectDistributed", str(props))
    consumer = rd_consumer(broker.bootstrap, **{"isolation.level": "read_committed"})
    seen: list[str] = []

    def poll_topic(seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            msg = consumer.poll(min(left, 0.5))
            if msg is not None and msg.error() is None:
                seen.append(msg.value().decode())

    try:
        wait_worker_ready(base, worker)
        status, _ = http("POST", base + "/connectors", {"name": "eos-source", "config": {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
            "tasks.max": "1", "file": str(source), "topic": topic,
            "exactly.once.support": "required", "transaction.boundary": "poll"}}, timeout=60)
        assert status == 201
        wait_until("eos-source RUNNING", lambda: running(base, "eos-source"), 90, worker)
        consumer.assign([TopicPartition(topic, 0, 0)])

        # batch.size stays at its default (2000): with a smaller one FileStreamSourceTask keeps
        # the lines left in its read buffer after a full batch until the file grows again
        # (poll() only looks at its buffer when the reader is ready()), so the last lines of a
        # file that stops growing are never sent, with or without weir.
        want = [f"line {i}" for i in range(2000 * KILLS)]
        # Lines arrive in small pieces; the worker dies while it is copying them (once 300 more
        # are committed), more arrive while it is down and while the new one starts.
        written = 0
        last = 0  # lines committed when the previous worker was killed
        for _ in range(KILLS):
            deadline = time.monotonic() + 120
            while len(seen) < last + 300:
                assert time.monotonic() < deadline, f"only {len(seen)} lines committed within 120s\n{worker.tail()}"
                worker.check_alive()
                if written < len(want) - 500 and written - len(seen) < 200:  # at most 200 lines not yet copied
                    append_lines(source, want[written:written + 20])
                    written += 20
                poll_topic(0.05)
            worker.kill()
            poll_topic(0.2)
            last = len(seen)
            more = min(written + 200, len(want) - 500)
            append_lines(source, want[written:more])
            written = max(written, more)
            worker = Jvm(log, "org.apache.kafka.connect.cli.ConnectDistributed", str(props))
        for i in range(written, len(want), 50):
            append_lines(source, want[i:i + 50])
            poll_topic(0.2)
        wait_until(f"{len(want)} lines committed", lambda: poll_topic(0.5) or len(seen) >= len(want), 150, worker,
                   interval=0)
        poll_topic(3.0)  # a duplicate would show up by now
        assert seen == want, (f"read_committed: {len(seen)} lines, want {len(want)} exactly once in order; "
                              f"first difference at line "
                              f"{next((i for i, (a, b) in enumerate(zip(seen, want)) if a != b), min(len(seen), len(want)))}"
                              f"\n{worker.tail()}")
    finally:
        consumer.close()
        worker.stop()
        worker.kill()


# -- MirrorMaker 2 ---------------------------------------------------------------------------------


def test_mirror_maker2_copies_topic_and_group_offsets(broker_factory, tmp_path, topic_name):
    a = broker_factory()
    b = broker_factory()
    group = f"{topic_name}-group"
    rd_create_topic(a.bootstrap, topic_name, 2, config={"retention.ms": "86400000"})
    msgs = [Msg(f"k{i % 13}".encode(), f"value {i}".encode(), (("i", str(i).encode()),), None, i % 2)
            for i in range(300)]
    rd_produce(rd_producer(a.bootstrap), topic_name, msgs)

    # A consumer group on A, subscribed, reads everything and commits the end of each partition.
    # (Translated offsets are exact only at an offset sync MM2 keeps: with offset.lag.max=0 it
    # keeps the latest sync per partition, so the end of the log translates exactly; an earlier
    # offset may translate to a lower one on purpose, KAFKA-14666.)
    committed = {0: 150, 1: 150}
    c = rd_consumer(a.bootstrap, **{"group.id": group, "session.timeout.ms": 6000})
    try:
        c.subscribe([topic_name])
        deadline = time.monotonic() + 30
        while len(c.assignment()) < 2:
            assert time.monotonic() < deadline, "the group consumer got no assignment within 30s"
            c.poll(0.2)
        c.commit(offsets=[TopicPartition(topic_name, p, o) for p, o in committed.items()], asynchronous=False)
    finally:
        c.close()

    props = tmp_path / "mm2.properties"
    props.write_text("\n".join([
        "clusters = A, B",
        f"A.bootstrap.servers = {a.bootstrap}",
        f"B.bootstrap.servers = {b.bootstrap}",
        "A->B.enabled = true",
        f"A->B.topics = {topic_name}",
        f"A->B.groups = {group}",
        "B->A.enabled = false",
        "replication.factor = 1",
        "checkpoints.topic.replication.factor = 1",
        "heartbeats.topic.replication.factor = 1",
        "offset-syncs.topic.replication.factor = 1",
        "offset.storage.replication.factor = 1",
        "status.storage.replication.factor = 1",
        "config.storage.replication.factor = 1",
        "sync.group.offsets.enabled = true",
        "sync.group.offsets.interval.seconds = 1",
        "emit.checkpoints.interval.seconds = 1",
        "emit.heartbeats.interval.seconds = 1",
        "refresh.topics.interval.seconds = 2",
        "refresh.groups.interval.seconds = 2",
        "sync.topic.configs.interval.seconds = 2",
        "offset.lag.max = 0",
        "offset.flush.interval.ms = 500",
        "",
    ]))
    mm2 = Jvm(a.workdir / "mirror-maker.log", "org.apache.kafka.connect.mirror.MirrorMaker", str(props))
    target = f"A.{topic_name}"
    try:
        def topic_there():
            return target in rd_admin(b.bootstrap).list_topics(timeout=5).topics
        wait_until(f"{target} on B", topic_there, 120, mm2)
        assert len(rd_admin(b.bootstrap).list_topics(target, timeout=5).topics[target].partitions) == 2
        got = rd_consume(b.bootstrap, target, [0, 1], len(msgs), timeout=90, extra_wait=1.0)
        for p in (0, 1):
            sent = [(m.key, m.value, m.headers) for m in msgs if m.partition == p]
            have = [(r.key, r.value, r.headers) for r in got if r.partition == p]
            assert have == sent, f"{target} partition {p}: {len(have)} records differ from the {len(sent)} sent"

        # The group's committed offsets, translated onto B (the copy has the same offsets).
        admin_b = rd_consumer(b.bootstrap, **{"group.id": group})

        def translated():
            tps = admin_b.committed([TopicPartition(target, p) for p in (0, 1)], timeout=10)
            return {tp.partition: tp.offset for tp in tps} == committed
        try:
            wait_until(f"group {group}'s offsets {committed} on B", translated, 120, mm2)
        finally:
            admin_b.close()
        # The topic's config followed it (sync.topic.configs).
        wait_until(f"{target} retention.ms copied",
                   lambda: rd_topic_configs(b.bootstrap, target).get("retention.ms") == "86400000", 60, mm2)

        # While MirrorMaker runs: more records, and the group moves on; both follow onto B.
        more = [Msg(f"k{i % 13}".encode(), f"value {i}".encode(), (("i", str(i).encode()),), None, i % 2)
                for i in range(300, 400)]
        rd_produce(rd_producer(a.bootstrap), topic_name, more)
        c = rd_consumer(a.bootstrap, **{"group.id": group})
        try:
            committed = {0: 200, 1: 200}
            c.commit(offsets=[TopicPartition(topic_name, p, o) for p, o in committed.items()], asynchronous=False)
        finally:
            c.close()
        got = rd_consume(b.bootstrap, target, [0, 1], len(msgs) + len(more), timeout=90, extra_wait=1.0)
        for p in (0, 1):
            sent = [(m.key, m.value, m.headers) for m in msgs + more if m.partition == p]
            have = [(r.key, r.value, r.headers) for r in got if r.partition == p]
            assert have == sent, f"{target} partition {p}: {len(have)} records differ from the {len(sent)} sent"
        admin_b = rd_consumer(b.bootstrap, **{"group.id": group})
        try:
            wait_until(f"group {group}'s new offsets {committed} on B", translated, 120, mm2)
        finally:
            admin_b.close()
    finally:
        mm2.stop()
        mm2.kill()
