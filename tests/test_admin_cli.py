"""`weir topic ...` and `weir group ...` against a running broker, through Kafka's Admin APIs:
topics, configs and group offsets round-trip, each checked with confluent-kafka (a different
client), in tables and in --json."""

from __future__ import annotations

import json
import subprocess
import time

from confluent_kafka import Consumer, TopicPartition

from clients import CLIENT_TIMEOUT_S, rd_produce, rd_producer, rd_topic_configs, sample_messages
from conftest import WEIR_BIN


def weir(broker, *args: str, ok: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run([str(WEIR_BIN), *args, "--bootstrap", broker.bootstrap],
                       capture_output=True, text=True, timeout=60)
    if ok:
        assert p.returncode == 0, f"weir {' '.join(args)}: {p.returncode}\n{p.stdout}\n{p.stderr}"
    return p


def weir_json(broker, *args: str) -> dict:
    return json.loads(weir(broker, *args, "--json").stdout)


def test_topics_round_trip(broker, topic_name):
    out = weir(broker, "topic", "create", topic_name, "--partitions", "3", "--config", "retention.ms=3600000")
    assert f"created topic {topic_name} (3 partitions)" in out.stdout
    assert rd_topic_configs(broker.bootstrap, topic_name)["retention.ms"] == "3600000"

    listed = weir_json(broker, "topic", "list")["topics"]
    assert {"name": topic_name, "partitions": 3, "internal": False} in listed
    assert topic_name in weir(broker, "topic", "list").stdout

    rd_produce(rd_producer(broker.bootstrap), topic_name,
               [m for m in sample_messages(30, 3) if m.partition == 1])
    d = weir_json(broker, "topic", "describe", topic_name)
    ends = {p["partition"]: (p["start_offset"], p["end_offset"]) for p in d["partitions"]}
    assert ends == {0: (0, 0), 1: (0, 10), 2: (0, 0)}, ends
    assert d["configs"]["retention.ms"] == {"value": "3600000", "source": "DYNAMIC_TOPIC_CONFIG"}
    assert d["configs"]["segment.bytes"]["source"] == "DEFAULT_CONFIG"
    human = weir(broker, "topic", "describe", topic_name).stdout
    assert "PARTITION" in human and "retention.ms" in human and "DYNAMIC_TOPIC_CONFIG" in human

    weir(broker, "topic", "alter-config", topic_name, "--set", "retention.bytes=5000000", "--delete", "retention.ms")
    cfg = rd_topic_configs(broker.bootstrap, topic_name)
    assert cfg["retention.bytes"] == "5000000" and cfg["retention.ms"] == "604800000", cfg
    bad = weir(broker, "topic", "alter-config", topic_name, "--set", "retention.ms=soon", ok=False)
    assert bad.returncode == 1 and "InvalidConfig" in bad.stderr, bad.stderr

    weir(broker, "topic", "delete", topic_name)
    assert topic_name not in [t["name"] for t in weir_json(broker, "topic", "list")["topics"]]
    gone = weir(broker, "topic", "describe", topic_name, ok=False)
    assert gone.returncode == 1 and "UnknownTopicOrPartition" in gone.stderr, gone.stderr


def consume_in_group(bootstrap: str, group: str, topic: str, n: int) -> list[int]:
    """Offsets of partition 0 read by a group member (from its committed offset), committed."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    try:
        c.subscribe([topic])
        got = []
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.offset())
        c.commit(asynchronous=False)
        return got
    finally:
        c.close()


def committed(bootstrap: str, group: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        [tp] = c.committed([TopicPartition(topic, 0)], timeout=10)
        return tp.offset
    finally:
        c.close()


def test_groups_list_describe_and_reset(broker, topic_name):
    group = f"g-{topic_name}"
    weir(broker, "topic", "create", topic_name, "--partitions", "1")
    rd_produce(rd_producer(broker.bootstrap), topic_name, sample_messages(10, 1))
    assert consume_in_group(broker.bootstrap, group, topic_name, 6)[:1] == [0]
    first = committed(broker.bootstrap, group, topic_name)
    assert first >= 6

    groups = weir_json(broker, "group", "list")["groups"]
    assert {"group": group, "state": "Empty", "protocol_type": "consumer"} in groups
    d = weir_json(broker, "group", "describe", group)
    assert d["state"] == "Empty" and d["members"] == []
    assert d["offsets"] == [{"topic": topic_name, "partition": 0, "committed_offset": first,
                             "end_offset": 10, "lag": 10 - first}], d
    assert "LAG" in weir(broker, "group", "describe", group).stdout

    # Without --execute: the plan only.
    plan = weir_json(broker, "group", "reset-offsets", group, "--topic", topic_name, "--to-earliest")
    assert plan["executed"] is False
    assert plan["offsets"] == [{"topic": topic_name, "partition": 0, "old_offset": first, "new_offset": 0}]
    assert committed(broker.bootstrap, group, topic_name) == first
    # With it: the group starts over.
    weir(broker, "group", "reset-offsets", group, "--topic", topic_name, "--to-earliest", "--execute")
    assert committed(broker.bootstrap, group, topic_name) == 0
    assert consume_in_group(broker.bootstrap, group, topic_name, 10) == list(range(10))
    weir(broker, "group", "reset-offsets", group, "--topic", topic_name, "--to-offset", "4", "--execute")
    assert committed(broker.bootstrap, group, topic_name) == 4


def test_reset_refused_while_the_group_is_active(broker, topic_name):
    group = f"g-{topic_name}"
    weir(broker, "topic", "create", topic_name, "--partitions", "1")
    rd_produce(rd_producer(broker.bootstrap), topic_name, sample_messages(3, 1))
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "auto.offset.reset": "earliest"})
    try:
        c.subscribe([topic_name])
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while not c.assignment() and time.monotonic() < deadline:
            c.poll(0.2)
        assert c.assignment()
        p = weir(broker, "group", "reset-offsets", group, "--topic", topic_name, "--to-latest", "--execute", ok=False)
        assert p.returncode == 1 and "active members" in p.stderr, p.stderr
    finally:
        c.close()


def test_add_partitions_and_delete_records(broker, topic_name):
    """`weir topic add-partitions` (CreatePartitions) and `weir topic delete-records`
    (DeleteRecords), checked with confluent-kafka."""
    weir(broker, "topic", "create", topic_name, "--partitions", "1")
    out = weir(broker, "topic", "add-partitions", topic_name, "3")
    assert f"topic {topic_name} now has 3 partitions" in out.stdout
    md = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "x"})
    try:
        assert len(md.list_topics(topic_name, timeout=10).topics[topic_name].partitions) == 3
    finally:
        md.close()
    rd_produce(rd_producer(broker.bootstrap), topic_name, [m for m in sample_messages(30, 3) if m.partition == 2])
    r = weir_json(broker, "topic", "delete-records", topic_name, "--partition", "2", "--before", "4")
    assert r == {"topic": topic_name, "partition": 2, "low_watermark": 4}, r
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "x"})
    try:
        assert c.get_watermark_offsets(TopicPartition(topic_name, 2), timeout=10, cached=False) == (4, 10)
    finally:
        c.close()
    bad = weir(broker, "topic", "add-partitions", topic_name, "2", ok=False)
    assert bad.returncode == 1 and "InvalidPartitions" in bad.stderr, bad.stderr
    bad = weir(broker, "topic", "delete-records", topic_name, "--partition", "2", "--before", "99", ok=False)
    assert bad.returncode == 1 and "OffsetOutOfRange" in bad.stderr, bad.stderr
