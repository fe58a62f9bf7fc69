"""KafkaJS 2.2.4, the pure-JavaScript client most Node users run, against weir.

The scenarios live in tests/kafkajs/scenarios.js (one `node` run each, printing what it saw as
JSON); this file starts the brokers, runs them and asserts. KafkaJS is pinned by
tests/kafkajs/package-lock.json and installed with `npm ci` into tests/kafkajs/node_modules the
first time (scripts/test.sh installs node and npm). weir advertises one broker per core, so
every KafkaJS client here talks to several "brokers" (ports) of one process.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import time
from pathlib import Path

import pytest
from kafka.partitioner.default import murmur2

import kafka_wire

JS_DIR = Path(__file__).resolve().parent / "kafkajs"
# The version package-lock.json pins (2.2.4).
KAFKAJS_VERSION = json.loads((JS_DIR / "package-lock.json").read_text())["packages"]["node_modules/kafkajs"]["version"]
NODE_TIMEOUT_S = 90


@pytest.fixture(scope="session")
def kafkajs() -> Path:
    """tests/kafkajs/node_modules with KafkaJS at the pinned version: `npm ci` (from the lock
    file) when it is missing or another version, else nothing (it stays between runs)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    assert node and npm, "node and npm are needed (scripts/test.sh installs them: apt-get install nodejs npm)"
    installed = JS_DIR / "node_modules" / "kafkajs" / "package.json"
    if not installed.is_file() or json.loads(installed.read_text())["version"] != KAFKAJS_VERSION:
        proc = subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=JS_DIR,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, f"npm ci in {JS_DIR}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert json.loads(installed.read_text())["version"] == KAFKAJS_VERSION
    return JS_DIR


def js(kafkajs: Path, scenario: str, bootstrap: str, **args) -> dict:
    """Runs one scenario of scenarios.js; its JSON answer."""
    env = dict(os.environ, KAFKAJS_NO_PARTITIONER_WARNING="1")
    proc = subprocess.run(["node", str(kafkajs / "scenarios.js"), scenario, bootstrap, json.dumps(args)],
                          cwd=kafkajs, capture_output=True, text=True, timeout=NODE_TIMEOUT_S, env=env)
    assert proc.returncode == 0, (f"KafkaJS scenario {scenario}: exit {proc.returncode}\n"
                                  f"stdout: {proc.stdout[-4000:]}\nstderr: {proc.stderr[-8000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def fetch_batches(bootstrap: str, topic: str, partition: int) -> list[dict]:
    """Every record batch of a partition as stored: codec, producer id/epoch, base sequence, count."""
    sock = kafka_wire.connect(bootstrap)
    try:
        sock.sendall(kafka_wire.fetch(1, topic, partition, 0, max_bytes=8 << 20))
        _, body = kafka_wire.read_response(sock)
    finally:
        sock.close()
    (part,) = kafka_wire.parse_fetch_v4(body)
    records, pos, out = part["records"], 0, []
    while pos + 61 <= len(records):
        base_offset, batch_len = struct.unpack(">qi", records[pos:pos + 12])
        attributes, = struct.unpack(">h", records[pos + 21:pos + 23])
        pid, epoch, seq, count = struct.unpack(">qhii", records[pos + 43:pos + 61])
        out.append({"base_offset": base_offset, "codec": attributes & 7, "producer_id": pid,
                    "producer_epoch": epoch, "base_sequence": seq, "count": count})
        pos += 12 + batch_len
    return out


def key_partition(key: str, partitions: int) -> int:
    """The partition of a keyed record under Java's (and KafkaJS 2's default) partitioner."""
    return (murmur2(key.encode()) & 0x7FFFFFFF) % partitions


def sample_batches(partitions: int) -> tuple[list[list[dict]], list[dict]]:
    """Three sends: explicit partitions, keys, headers, a null key, timestamps, keyed routing.
    The records each partition should hold, in offset order."""
    batches = [
        [{"partition": p, "key": f"k{p}-{i}", "value": f"v{p}-{i} " + "x" * (i * 40),
          "headers": {"source": "kafkajs", "n": str(i)}} for p in range(partitions) for i in range(3)],
        [{"partition": 0, "key": None, "value": "no key", "timestamp": "1700000000123"},
         {"partition": 1, "key": "utf8", "value": "ünïcödé ✓", "headers": {"h1": "a", "h2": "b"}}],
        [{"key": f"routed-{i}", "value": f"by key {i}"} for i in range(8)],
    ]
    expected: dict[int, list[dict]] = {p: [] for p in range(partitions)}
    for batch in batches:
        for m in batch:
            p = m["partition"] if "partition" in m else key_partition(m["key"], partitions)
            expected[p].append({"partition": p, "offset": len(expected[p]), "key": m["key"], "value": m["value"],
                                "headers": m.get("headers", {})})
    return batches, [r for p in range(partitions) for r in expected[p]]


def by_partition_offset(records: list[dict]) -> list[dict]:
    """Sorted by (partition, offset), without their timestamps."""
    return sorted(({k: v for k, v in r.items() if k != "timestamp"} for r in records),
                  key=lambda r: (r["partition"], r["offset"]))


def test_admin_topics_and_configs(kafkajs, broker, topic_name):
    """createTopics (with a config), listTopics, fetchTopicMetadata, describeCluster,
    describeConfigs, alterConfigs, deleteTopics."""
    out = js(kafkajs, "admin", broker.bootstrap, topic=topic_name, partitions=4)
    assert out["created"] is True
    assert out["createdAgain"] is False  # KafkaJS: false when the topic already exists
    assert out["listed"] is True
    (md,) = out["metadata"]
    assert md["name"] == topic_name
    parts = sorted(md["partitions"], key=lambda p: p["partitionId"])
    assert [p["partitionId"] for p in parts] == [0, 1, 2, 3]
    broker_ids = {b["nodeId"] for b in out["brokers"]}
    # One broker per core (listeners.per.core): each partition is led by one of them.
    assert len(broker_ids) == len(os.sched_getaffinity(0)), out["brokers"]
    assert all(b["host"] == "127.0.0.1" and b["port"] != broker.port for b in out["brokers"]), out["brokers"]
    for p in parts:
        assert p["partitionErrorCode"] == 0 and p["leader"] in broker_ids and p["replicas"] == [p["leader"]], p
    if len(broker_ids) > 1:
        assert len({p["leader"] for p in parts}) > 1, f"every partition on one core: {parts}"

    def entries(resources):
        (res,) = resources
        assert res["errorCode"] == 0 and res["resourceName"] == topic_name, res
        return {e["configName"]: (e["configValue"], e["isDefault"]) for e in res["configEntries"]}

    assert entries(out["configsBefore"]) == {"retention.ms": ("3600000", False), "cleanup.policy": ("delete", True)}
    assert entries(out["configsAfter"]) == {"retention.ms": ("7200000", False), "cleanup.policy": ("compact", False)}
    assert out["listedAfterDelete"] is False


@pytest.mark.parametrize("acks,compression", [(-1, "none"), (1, "none"), (-1, "gzip")])
def test_produce_then_consume_with_a_group(kafkajs, broker, topic_name, acks, compression):
    """Records sent with acks -1 / 1 (and gzip) come back to a consumer group from the
    beginning, exactly: partition, offset, key, value, headers; keyed records land where
    Java's partitioner (KafkaJS 2's default) puts them; gzip batches are stored gzipped."""
    partitions = 3
    js(kafkajs, "admin_create", broker.bootstrap, topic=topic_name, partitions=partitions)
    batches, expected = sample_batches(partitions)
    out = js(kafkajs, "produce", broker.bootstrap, topic=topic_name, acks=acks, compression=compression,
             batches=batches)
    # The offsets each send was answered with: the first send starts every partition at 0.
    first = {r["partition"]: int(r["baseOffset"]) for r in out["results"][0]}
    assert first == {p: 0 for p in range(partitions)}, out["results"][0]
    assert all(r["errorCode"] == 0 for res in out["results"] for r in res)

    got = js(kafkajs, "consume", broker.bootstrap, topic=topic_name, groupId=f"g-{topic_name}",
             count=len(expected))["records"]
    assert len(got) == len(expected), "a record arrived twice" if len(got) > len(expected) else got
    assert by_partition_offset(got) == expected
    # CreateTime: the one KafkaJS was given, or the send's time.
    now_ms = time.time() * 1000
    for r in got:
        if r["value"] == "no key":
            assert r["timestamp"] == 1700000000123, r
        else:
            assert now_ms - 60_000 < r["timestamp"] <= now_ms, r
    # Within a partition, in offset order.
    for p in range(partitions):
        offs = [r["offset"] for r in got if r["partition"] == p]
        assert offs == sorted(offs)

    codecs = [b["codec"] for p in range(partitions) for b in fetch_batches(broker.bootstrap, topic_name, p)]
    assert codecs and set(codecs) == {1 if compression == "gzip" else 0}, codecs


def test_idempotent_producer(kafkajs, broker, topic_name):
    """`idempotent: true, maxInFlightRequests: 1`: InitProducerId gives a producer id, every
    batch carries it with consecutive sequences, and the records are there once each."""
    js(kafkajs, "admin_create", broker.bootstrap, topic=topic_name, partitions=2)
    batches = [[{"partition": p, "key": f"k{s}-{i}", "value": f"send {s} record {i}"} for p in range(2)
                for i in range(s + 1)] for s in range(4)]
    out = js(kafkajs, "produce", broker.bootstrap, topic=topic_name, acks=-1, idempotent=True, batches=batches)
    assert all(r["errorCode"] == 0 for res in out["results"] for r in res)
    expected = [{"partition": p, "offset": o, "key": m["key"], "value": m["value"], "headers": {}}
                for p in range(2)
                for o, m in enumerate(m for b in batches for m in b if m["partition"] == p)]
    got = js(kafkajs, "consume", broker.bootstrap, topic=topic_name, groupId=f"g-{topic_name}",
             count=len(expected))["records"]
    assert by_partition_offset(got) == expected and len(got) == len(expected)

    pids = set()
    for p in range(2):
        stored = fetch_batches(broker.bootstrap, topic_name, p)
        assert [b["count"] for b in stored] == [1, 2, 3, 4], stored
        # Sequences continue across sends: 0, 1, 3, 6.
        assert [b["base_sequence"] for b in stored] == [0, 1, 3, 6], stored
        assert len({(b["producer_id"], b["producer_epoch"]) for b in stored}) == 1, stored
        pids.add(stored[0]["producer_id"])
    (pid,) = pids
    assert pid >= 0


def test_two_consumers_split_then_rebalance_when_one_leaves(kafkajs, broker, topic_name):
    """Two KafkaJS consumers in one group split the partitions between them; each record goes
    to its partition's owner only; when one disconnects (LeaveGroup) the other rejoins and
    gets every partition, and the records produced afterwards."""
    partitions = 4
    js(kafkajs, "admin_create", broker.bootstrap, topic=topic_name, partitions=partitions)
    out = js(kafkajs, "rebalance", broker.bootstrap, topic=topic_name, groupId=f"g-{topic_name}",
             partitions=partitions)
    split = out["split"]
    assert split["c1"] and split["c2"], split
    assert sorted(split["c1"] + split["c2"]) == list(range(partitions)), split
    assert out["memberIds"][0] != out["memberIds"][1]
    for name in ("c1", "c2"):
        splits = [r for r in out[name] if r["key"].startswith("split")]
        assert sorted(r["partition"] for r in splits) == split[name], (name, splits)
        assert all(r["offset"] == 0 for r in splits)
    assert out["afterLeave"]["c1"] == list(range(partitions))
    after = [r for r in out["c1"] if r["key"].startswith("after")]
    assert sorted((r["partition"], r["offset"]) for r in after) == [(p, 1) for p in range(partitions)]
    assert not [r for r in out["c2"] if r["key"].startswith("after")]
    # A KafkaJS heartbeat (300 ms here) tells the first member to rejoin: well within the
    # rebalance timeout (10 s), which a rebalance waiting for a lost member would take.
    assert split["ms"] < 8000 and out["afterLeave"]["ms"] < 8000, out


def test_committed_offsets_resume_after_restarts(kafkajs, broker, topic_name):
    """A KafkaJS consumer group commits what it consumed; after the consumer and the broker
    restart, the group resumes right after it: only the new records arrive."""
    js(kafkajs, "admin_create", broker.bootstrap, topic=topic_name, partitions=2)
    group = f"g-{topic_name}"
    first = [[{"partition": p, "key": f"a{i}", "value": f"first {p}/{i}"} for p in range(2) for i in range(3)]]
    js(kafkajs, "produce", broker.bootstrap, topic=topic_name, acks=-1, batches=first)
    got = js(kafkajs, "consume", broker.bootstrap, topic=topic_name, groupId=group, count=6)["records"]
    assert len(got) == 6
    broker.restart()
    second = [[{"partition": p, "key": f"b{i}", "value": f"second {p}/{i}"} for p in range(2) for i in range(2)]]
    js(kafkajs, "produce", broker.bootstrap, topic=topic_name, acks=1, batches=second)
    got = js(kafkajs, "consume", broker.bootstrap, topic=topic_name, groupId=group, count=4)["records"]
    assert sorted((r["partition"], r["offset"], r["key"]) for r in got) == [
        (p, 3 + i, f"b{i}") for p in range(2) for i in range(2)], got


def test_group_admin_offsets(kafkajs, broker, topic_name):
    """admin.fetchOffsets, describeGroups, listGroups of a group that consumed and left;
    resetOffsets (earliest), setOffsets; a consumer then starts at the offsets set."""
    partitions = 3
    js(kafkajs, "admin_create", broker.bootstrap, topic=topic_name, partitions=partitions)
    group = f"g-{topic_name}"
    batch = [{"partition": p, "key": f"k{i}", "value": f"{p}/{i}"} for p in range(partitions) for i in range(p + 2)]
    js(kafkajs, "produce", broker.bootstrap, topic=topic_name, acks=-1, batches=[batch])
    js(kafkajs, "consume", broker.bootstrap, topic=topic_name, groupId=group, count=len(batch))
    ends = [{"partition": p, "offset": p + 2} for p in range(partitions)]

    set_to = [{"partition": 0, "offset": 1}, {"partition": 2, "offset": 3}]
    out = js(kafkajs, "groupAdmin", broker.bootstrap, topic=topic_name, groupId=group, setTo=set_to)
    assert out["committed"] == ends
    (desc,) = out["described"]
    assert desc["errorCode"] == 0 and desc["groupId"] == group, desc
    assert desc["state"] == "Empty" and desc["protocolType"] == "consumer" and desc["members"] == [], desc
    # Every broker (core) is asked; the group is listed once, by its coordinator.
    listed = [g for g in out["listed"] if g["groupId"] == group]
    assert listed == [{"groupId": group, "protocolType": "consumer"}], out["listed"]
    # KafkaJS's resetOffsets commits the sentinel itself (-2, "earliest", as against Kafka);
    # its consumers read a negative committed offset as "start from the default".
    assert out["afterResetEarliest"] == [{"partition": p, "offset": -2} for p in range(partitions)]
    # setOffsets names partitions 0 and 2; partition 1 keeps -2.
    assert out["afterSet"] == [{"partition": 0, "offset": 1}, {"partition": 1, "offset": -2},
                               {"partition": 2, "offset": 3}]
    assert out["topicOffsets"] == [{"partition": p, "low": 0, "high": p + 2} for p in range(partitions)]

    # A consumer of the group resumes there: partition 0 from 1, 1 from its start, 2 from 3.
    got = js(kafkajs, "consume", broker.bootstrap, topic=topic_name, groupId=group, count=5)["records"]
    assert sorted((r["partition"], r["offset"]) for r in got) == [(0, 1), (1, 0), (1, 1), (1, 2), (2, 3)], got


def test_transactions_commit_and_abort(kafkajs, broker, topic_name):
    """KafkaJS's transactional producer (FindCoordinator for the transactional id,
    InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn + TxnOffsetCommit via sendOffsets,
    EndTxn): a committed, an aborted and a committed transaction. KafkaJS consumers read
    committed by default: they see the two committed records only; read_uncommitted sees the
    aborted one too. The offsets sent with the last transaction are the group's."""
    js(kafkajs, "admin_create", broker.bootstrap, topic=topic_name, partitions=1)
    out = js(kafkajs, "transaction", broker.bootstrap, topic=topic_name, groupId=f"{topic_name}-g")
    assert out["error"] is None, out
    assert out["readCommitted"] == ["committed-1", "committed-2"], out
    assert out["readUncommitted"] == ["committed-1", "aborted", "committed-2"], out
    assert out["committed"] == [2], out
    batches = fetch_batches(broker.bootstrap, topic_name, 0)
    # Three data batches and three markers (control batches: attributes bit 5).
    assert len(batches) == 6, batches
