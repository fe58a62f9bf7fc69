"""Compacted topics (cleanup.policy=compact) with real clients (issue 17).

What a user notices: a compacted topic keeps the latest value of every key — a new consumer
reading from the beginning gets one record per key, with its latest value, and no deleted
(tombstoned) key once `delete.retention.ms` has passed — whatever the producer's compression;
the topic's disk use shrinks; and all of it holds after a restart and a kill -9. Records still
in the active segment are not compacted (as in Kafka), so the topics here roll by `segment.ms`.
"""

from __future__ import annotations

import time

import confluent_kafka
import pytest

from clients import rd_conf, rd_consumer, rd_create_topic, rd_producer, rd_topic_configs

KEYS = 60
UPDATES = 25
DELETED = {k for k in range(KEYS) if k % 7 == 3}
SETTINGS = {"log.cleaner.backoff.ms": 100, "log.retention.check.interval.ms": 100}
TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.ms": "300",
    "segment.bytes": "65536",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "0",
}


def key(k: int) -> bytes:
    return f"key-{k:03d}".encode()


def value(k: int, u: int) -> bytes:
    return f"value-{k:03d}-{u:03d}-".encode() * 20


def produce_updates(bootstrap: str, topic: str, compression: str) -> None:
    p = rd_producer(bootstrap, acks="all", **{"compression.type": compression, "linger.ms": 5})
    for u in range(UPDATES):
        for k in range(KEYS):
            p.produce(topic, key=key(k), value=value(k, u), partition=0)
        p.poll(0)
    for k in sorted(DELETED):
        p.produce(topic, key=key(k), value=None, partition=0)  # tombstone
    assert p.flush(30) == 0, "produce did not complete"


def read_all(bootstrap: str, topic: str, timeout: float = 20.0) -> list[tuple[int, bytes, bytes | None]]:
    """Every record of partition 0 from the beginning to the end, as a new consumer sees them."""
    c = rd_consumer(bootstrap, **{"enable.partition.eof": True})
    c.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
    out = []
    deadline = time.time() + timeout
    try:
        while time.time() < deadline:
            m = c.poll(1.0)
            if m is None:
                continue
            if m.error():
                if m.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    return out
                raise AssertionError(f"consumer error: {m.error()}")
            out.append((m.offset(), m.key(), m.value()))
        raise AssertionError(f"no end of partition within {timeout} s ({len(out)} records)")
    finally:
        c.close()


def high_watermark(bootstrap: str, topic: str) -> int:
    c = rd_consumer(bootstrap)
    try:
        _, high = c.get_watermark_offsets(confluent_kafka.TopicPartition(topic, 0), timeout=10)
        return high
    finally:
        c.close()


def latest_view(recs) -> dict[bytes, bytes | None]:
    view = {}
    for _, k, v in recs:
        view[k] = v
    return view


def wait_compacted(bootstrap: str, topic: str, timeout: float = 60.0) -> list:
    """Waits until the topic reads as fully compacted: one record per live key, no tombstone."""
    deadline = time.time() + timeout
    recs = []
    while time.time() < deadline:
        recs = read_all(bootstrap, topic)
        keys = [k for _, k, _ in recs]
        if len(keys) == KEYS - len(DELETED) and all(v is not None for _, _, v in recs):
            return recs
        time.sleep(0.3)
    raise AssertionError(f"not compacted within {timeout} s: {len(recs)} records, "
                         f"{sum(v is None for _, _, v in recs)} tombstones")


def closed_segment_bytes(b, topic: str) -> int:
    """Bytes of the partition's segment files but the active (last, preallocated) one."""
    files = sorted(f for f in b.data_dir.rglob("*.log") if f.parent.name == f"{topic}-0")
    assert files, f"no segment files of {topic}"
    return sum(f.stat().st_size for f in files[:-1])


@pytest.mark.parametrize("compression", ["none", "lz4", "zstd"])
def test_compacted_topic_keeps_the_latest_value_per_key(broker_factory, topic_name, compression):
    b = broker_factory(settings=SETTINGS)
    rd_create_topic(b.bootstrap, topic_name, 1, config=TOPIC_CONFIG)
    assert rd_topic_configs(b.bootstrap, topic_name)["cleanup.policy"] == "compact"
    produce_updates(b.bootstrap, topic_name, compression)
    before = read_all(b.bootstrap, topic_name)
    want = {key(k): value(k, UPDATES - 1) for k in range(KEYS) if k not in DELETED}
    assert {k: v for k, v in latest_view(before).items() if v is not None} == want

    recs = wait_compacted(b.bootstrap, topic_name)
    assert {k: v for _, k, v in recs} == want, "one record per key, with its latest value"
    offsets = [o for o, _, _ in recs]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    # Offsets are kept, not reassigned: each survivor sits where it was produced.
    where = {k: o for o, k, _ in before}
    assert all(where[k] == o for o, k, _ in recs)
    produced = KEYS * UPDATES * (len(key(0)) + len(value(0, 0)))
    assert closed_segment_bytes(b, topic_name) < produced / 10, "the topic's disk use shrank"

    # Producing goes on at the old end (the log end offset, which compaction never moves back —
    # the last records read may themselves have been compacted away, e.g. a key's last value
    # and its tombstone), and the new records are served after the compacted ones.
    end = high_watermark(b.bootstrap, topic_name)
    p = rd_producer(b.bootstrap, acks="all", **{"compression.type": compression})
    p.produce(topic_name, key=key(0), value=b"after", partition=0)
    assert p.flush(10) == 0
    recs2 = read_all(b.bootstrap, topic_name)
    assert recs2[-1] == (end, key(0), b"after")

    # Durable: a clean restart and a kill -9 both come back with the compacted log.
    for restart in (b.restart, b.kill9):
        restart()
        assert read_all(b.bootstrap, topic_name) == recs2


def test_compact_delete_also_applies_retention_and_delete_alone_does_not_compact(broker_factory, topic_name):
    b = broker_factory(settings=SETTINGS)
    rd_create_topic(b.bootstrap, topic_name + "-del", 1,
                    config={**TOPIC_CONFIG, "cleanup.policy": "delete"})
    produce_updates(b.bootstrap, topic_name + "-del", "none")
    rd_create_topic(b.bootstrap, topic_name, 1,
                    config={**TOPIC_CONFIG, "cleanup.policy": "compact,delete", "retention.ms": "3600000"})
    produce_updates(b.bootstrap, topic_name, "none")
    wait_compacted(b.bootstrap, topic_name)
    # The delete-only topic keeps every record however long the cleaner runs.
    time.sleep(1.5)
    assert len(read_all(b.bootstrap, topic_name + "-del")) == KEYS * UPDATES + len(DELETED)


def test_bad_compaction_configs_are_refused(broker_factory, topic_name):
    b = broker_factory(settings=SETTINGS)
    admin = confluent_kafka.admin.AdminClient(rd_conf(b.bootstrap))
    for cfg, why in [({"cleanup.policy": "compact,sometimes"}, "not a list"),
                     ({"min.cleanable.dirty.ratio": "1.5"}, "ratio"),
                     ({"max.compaction.lag.ms": "0"}, "between 1")]:
        fs = admin.create_topics([confluent_kafka.admin.NewTopic(topic_name, 1, 1, config=cfg)])
        with pytest.raises(confluent_kafka.KafkaException) as e:
            fs[topic_name].result(10)
        assert e.value.args[0].code() == confluent_kafka.KafkaError.INVALID_CONFIG, cfg
        assert why in e.value.args[0].str(), (cfg, e.value.args[0].str())


def test_a_record_without_a_key_is_refused_on_a_compacted_topic(broker_factory, topic_name):
    """Kafka refuses keyless records on compacted topics (INVALID_RECORD): compaction keeps the
    latest record per key, so a keyless one could never be compacted. Nothing is written."""
    b = broker_factory(settings=SETTINGS)
    rd_create_topic(b.bootstrap, topic_name, 1, config=TOPIC_CONFIG)
    for compression in ("none", "gzip"):
        p = rd_producer(b.bootstrap, acks="all", retries=0, **{"compression.type": compression})
        errors = []
        p.produce(topic_name, key=None, value=b"no key", partition=0,
                  on_delivery=lambda err, msg: errors.append(err))
        p.flush(10)
        assert len(errors) == 1 and errors[0] is not None, errors
        assert errors[0].code() == confluent_kafka.KafkaError.INVALID_RECORD, errors[0]
    p = rd_producer(b.bootstrap, acks="all")
    p.produce(topic_name, key=b"k", value=b"keyed", partition=0)
    assert p.flush(10) == 0
    assert [(k, v) for _, k, v in read_all(b.bootstrap, topic_name)] == [(b"k", b"keyed")]


def test_kill9_in_the_middle_of_a_cleaning(broker_factory, topic_name):
    """A broker killed while a cleaning is writing its new segment comes back with every key's
    latest value (the old segments, untouched), no leftover cleaning file, and then finishes
    compacting. The cleaner's I/O cap slows the cleaning down so the kill lands inside it."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    b = broker_factory(settings={**SETTINGS, "log.cleaner.io.max.bytes.per.second": 400_000})
    rd_create_topic(b.bootstrap, topic_name, 1,
                    config={**TOPIC_CONFIG, "min.compaction.lag.ms": "3600000"})
    produce_updates(b.bootstrap, topic_name, "none")
    time.sleep(0.8)  # segment.ms rolls the last segment: all of it is cleanable once released
    want = {key(k): value(k, UPDATES - 1) for k in range(KEYS) if k not in DELETED}
    part_dir = next(d for d in b.data_dir.rglob(f"{topic_name}-0") if d.is_dir())

    admin = confluent_kafka.admin.AdminClient(rd_conf(b.bootstrap))
    res = ConfigResource("TOPIC", topic_name, incremental_configs=[
        ConfigEntry("min.compaction.lag.ms", "0", incremental_operation=AlterConfigOpType.SET)])
    [f] = admin.incremental_alter_configs([res]).values()
    f.result(10)
    deadline = time.time() + 20
    while not list(part_dir.glob("*.cleaned")):
        assert time.time() < deadline, "the cleaning never started"
        time.sleep(0.02)
    b.kill9()

    recs = read_all(b.bootstrap, topic_name)
    assert {k: v for k, v in latest_view(recs).items() if v is not None} == want
    assert not [p.name for p in part_dir.iterdir() if p.name.endswith((".cleaned", ".swap"))], \
        "open removed or finished the interrupted cleaning's files"
    recs = wait_compacted(b.bootstrap, topic_name)
    assert {k: v for _, k, v in recs} == want
