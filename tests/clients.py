"""Helpers around the real Kafka clients (confluent-kafka = librdkafka, and kafka-python).

Everything here has a deadline. Consumers use `assign` with explicit offsets: weir has no
group coordinator yet, so no consumer commits or fetches committed offsets.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass

import confluent_kafka
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

import kafka

CLIENT_TIMEOUT_S = 30.0

# librdkafka's own log lines go through Python logging: pytest shows them with a failing test,
# and a client kept alive by a failure's traceback does not flood stderr after its broker is gone.
RDKAFKA_LOGGER = logging.getLogger("librdkafka")


@dataclass(frozen=True)
class Rec:
    """A record as a consumer sees it, comparable across clients."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int

    def content(self):
        """What the producer chose (not the broker-assigned offset)."""
        return (self.key, self.value, self.headers, self.timestamp)


@dataclass(frozen=True)
class Msg:
    """A record to produce."""

    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    timestamp: int | None = None
    partition: int | None = None

    def content(self):
        return (self.key, self.value, self.headers, self.timestamp)


def now_ms() -> int:
    return int(time.time() * 1000)


def sample_messages(n: int, partitions: int, t0: int | None = None) -> list[Msg]:
    """Varied records: null and empty keys/values, repeated and empty headers, explicit timestamps."""
    t0 = now_ms() - 60_000 if t0 is None else t0
    out = []
    for i in range(n):
        key = None if i % 11 == 3 else (b"" if i % 13 == 5 else f"key-{i % 7}".encode())
        value = None if i % 17 == 9 else (b"" if i % 19 == 2 else (f"value-{i}|".encode() * (1 + i % 5)))
        headers = (("index", str(i).encode()), ("dup", b"a"), ("dup", b"b")) if i % 2 == 0 else (
            ("empty", b""),) if i % 3 == 0 else ()
        out.append(Msg(key, value, headers, t0 + i * 10, i % partitions))
    return out


def by_partition(recs):
    out: dict[int, list] = {}
    for r in recs:
        out.setdefault(r.partition, []).append(r)
    return out


def assert_exact(sent: list[Msg], got: list[Rec], start_offsets: dict[int, int] | None = None):
    """The consumer saw exactly what was sent: per partition, same order, same content, offsets
    contiguous from the start offset (0 by default)."""
    want = by_partition(sent)
    have = by_partition(got)
    assert sorted(have) == sorted(want), f"partitions with data: got {sorted(have)}, want {sorted(want)}"
    for p, msgs in want.items():
        recs = have[p]
        start = (start_offsets or {}).get(p, 0)
        assert [r.offset for r in recs] == list(range(start, start + len(msgs))), f"partition {p} offsets"
        assert len(recs) == len(msgs), f"partition {p}: got {len(recs)} records, want {len(msgs)}"
        for i, (m, r) in enumerate(zip(msgs, recs)):
            assert r.content() == m.content(), f"partition {p} record {i} (offset {r.offset}) differs"


# -- confluent-kafka (librdkafka) ----------------------------------------------------------------


def rd_conf(bootstrap: str, **conf) -> dict:
    base = {
        "bootstrap.servers": bootstrap,
        "socket.timeout.ms": 10000,
        "broker.address.family": "v4",
        "topic.metadata.refresh.interval.ms": 10000,
        "logger": RDKAFKA_LOGGER,
    }
    base.update(conf)
    return base


def rd_producer(bootstrap: str, **conf) -> Producer:
    base = {"linger.ms": 5, "message.timeout.ms": 20000, "enable.idempotence": False}
    base.update(conf)
    return Producer(rd_conf(bootstrap, **base))


def rd_produce(producer: Producer, topic: str, msgs: list[Msg], timeout: float = CLIENT_TIMEOUT_S) -> list:
    """Produces all and waits for every delivery report; returns the delivered messages in order.
    Fails on any delivery error."""
    reports: list = [None] * len(msgs)

    def cb(i):
        def on_delivery(err, msg):
            reports[i] = (err, msg)
        return on_delivery

    for i, m in enumerate(msgs):
        kwargs = {"key": m.key, "value": m.value, "on_delivery": cb(i)}
        if m.headers:
            kwargs["headers"] = list(m.headers)
        if m.timestamp is not None:
            kwargs["timestamp"] = m.timestamp
        if m.partition is not None:
            kwargs["partition"] = m.partition
        while True:
            try:
                producer.produce(topic, **kwargs)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    remaining = producer.flush(timeout)
    assert remaining == 0, f"{remaining} messages still undelivered after {timeout}s"
    errors = [(i, r[0]) for i, r in enumerate(reports) if r is None or r[0] is not None]
    assert not errors, f"delivery failed for {len(errors)} messages, first: {errors[0]}"
    return [r[1] for r in reports]


def rd_consumer(bootstrap: str, **conf) -> Consumer:
    base = {
        "group.id": f"weir-test-{uuid.uuid4().hex[:8]}",  # required by the client; never used
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": False,
        "fetch.wait.max.ms": 100,
    }
    base.update(conf)
    return Consumer(rd_conf(bootstrap, **base))


def rd_rec(msg) -> Rec:
    headers = tuple((k, v) for k, v in (msg.headers() or []))
    return Rec(msg.partition(), msg.offset(), msg.key(), msg.value(), headers, msg.timestamp()[1])


def rd_poll(consumer: Consumer, n: int, timeout: float = CLIENT_TIMEOUT_S) -> list[Rec]:
    """Polls until n records arrived (fails on a consumer error or the deadline)."""
    out: list[Rec] = []
    deadline = time.monotonic() + timeout
    while len(out) < n:
        left = deadline - time.monotonic()
        assert left > 0, f"got {len(out)} of {n} records within {timeout}s"
        msg = consumer.poll(min(left, 1.0))
        if msg is None:
            continue
        assert msg.error() is None, f"consumer error: {msg.error()}"
        out.append(rd_rec(msg))
    return out


def rd_consume(bootstrap: str, topic: str, partitions, n: int, offset=confluent_kafka.OFFSET_BEGINNING,
               timeout: float = CLIENT_TIMEOUT_S, extra_wait: float = 0.5, **conf) -> list[Rec]:
    """Reads n records from the given partitions starting at `offset`, then waits `extra_wait`
    seconds to make sure no more records come (more than were produced is a failure too)."""
    c = rd_consumer(bootstrap, **conf)
    try:
        c.assign([TopicPartition(topic, p, offset) for p in partitions])
        out = rd_poll(c, n, timeout)
        if extra_wait:
            deadline = time.monotonic() + extra_wait
            while (left := deadline - time.monotonic()) > 0:
                msg = c.poll(left)
                assert msg is None or msg.error() is not None, f"unexpected extra record {rd_rec(msg)}"
        return out
    finally:
        c.close()


def rd_admin(bootstrap: str) -> AdminClient:
    return AdminClient(rd_conf(bootstrap))


def rd_create_topic(bootstrap: str, topic: str, partitions: int = 1, config: dict | None = None,
                    timeout: float = CLIENT_TIMEOUT_S) -> None:
    admin = rd_admin(bootstrap)
    fs = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1,
                                       config=config or {})], operation_timeout=10, request_timeout=timeout)
    fs[topic].result(timeout)
    wait_for_topic(bootstrap, topic, partitions)


def rd_topic_configs(bootstrap: str, topic: str, timeout: float = CLIENT_TIMEOUT_S) -> dict[str, str | None]:
    """DescribeConfigs of a topic: {name: value}."""
    admin = rd_admin(bootstrap)  # must outlive the future
    [future] = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)], request_timeout=timeout).values()
    return {name: entry.value for name, entry in future.result(timeout).items()}


def wait_for_topic(bootstrap: str, topic: str, partitions: int, timeout: float = 10.0) -> None:
    """Metadata shows the topic with its partitions and leaders."""
    admin = rd_admin(bootstrap)
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        md = admin.list_topics(topic=topic, timeout=5)
        t = md.topics.get(topic)
        last = t
        if t is not None and t.error is None and len(t.partitions) == partitions and all(
                p.leader >= 0 for p in t.partitions.values()):
            return
        time.sleep(0.1)
    raise AssertionError(f"topic {topic} not in metadata with {partitions} partitions: {last and (last.error, last.partitions)}")


# -- kafka-python --------------------------------------------------------------------------------


def kp_producer(bootstrap: str, **conf) -> kafka.KafkaProducer:
    base = dict(bootstrap_servers=bootstrap, request_timeout_ms=10000, max_block_ms=20000,
                linger_ms=5, delivery_timeout_ms=30000)
    base.update(conf)
    return kafka.KafkaProducer(**base)


def kp_produce(producer: kafka.KafkaProducer, topic: str, msgs: list[Msg], timeout: float = CLIENT_TIMEOUT_S):
    futures = []
    for m in msgs:
        futures.append(producer.send(topic, value=m.value, key=m.key, headers=list(m.headers) or None,
                                     partition=m.partition, timestamp_ms=m.timestamp))
    producer.flush(timeout)
    return [f.get(timeout=timeout) for f in futures]


def kp_consumer(bootstrap: str, **conf) -> kafka.KafkaConsumer:
    base = dict(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                auto_offset_reset="earliest", fetch_max_wait_ms=100, request_timeout_ms=20000)
    base.update(conf)
    return kafka.KafkaConsumer(**base)


def kp_rec(r) -> Rec:
    headers = tuple((k, v) for k, v in (r.headers or []))
    return Rec(r.partition, r.offset, r.key, r.value, headers, r.timestamp)


def kp_poll(consumer: kafka.KafkaConsumer, n: int, timeout: float = CLIENT_TIMEOUT_S) -> list[Rec]:
    """Polls until n records arrived (fails at the deadline)."""
    out: list[Rec] = []
    deadline = time.monotonic() + timeout
    while len(out) < n:
        left = deadline - time.monotonic()
        assert left > 0, f"got {len(out)} of {n} records within {timeout}s"
        for recs in consumer.poll(timeout_ms=int(min(left, 1.0) * 1000)).values():
            out.extend(kp_rec(r) for r in recs)
    return out


def kp_consume(bootstrap: str, topic: str, partitions, n: int, offset: int | None = None,
               timeout: float = CLIENT_TIMEOUT_S, extra_wait: float = 0.5, **conf) -> list[Rec]:
    c = kp_consumer(bootstrap, **conf)
    try:
        tps = [kafka.TopicPartition(topic, p) for p in partitions]
        c.assign(tps)
        for tp in tps:
            if offset is None:
                c.seek_to_beginning(tp)
            else:
                c.seek(tp, offset)
        out = kp_poll(c, n, timeout)
        if extra_wait:
            extra = c.poll(timeout_ms=int(extra_wait * 1000))
            assert not any(extra.values()), f"unexpected extra records {extra}"
        return out
    finally:
        c.close()


# -- kcat ----------------------------------------------------------------------------------------


def kcat_bin() -> str:
    path = os.environ.get("KCAT") or shutil.which("kcat") or shutil.which("kafkacat")
    assert path, "kcat is not installed (scripts/test.sh installs it)"
    return path


def kcat(bootstrap: str, *args: str, input: bytes | None = None, timeout: float = 30.0) -> subprocess.CompletedProcess:
    cmd = [kcat_bin(), "-b", bootstrap, "-X", "broker.address.family=v4", *args]
    try:
        return subprocess.run(cmd, input=input, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"{' '.join(cmd)} did not finish within {timeout}s; stderr: {e.stderr!r}") from e
