"""Compaction of a partition replicated across three brokers (docs/replication.md, "Compacting
replicated partitions"; issue 19).

What broke before: a `cleanup.policy=compact` topic with a replication factor above 1 was never
compacted (the cleaner skipped replicated partitions), so Kafka Connect's and Schema
Registry's topics, compacted at RF 3, grew without bound; the test's first wait fails.

Each replica compacts its own log, as a Kafka replica does, keeping every batch (a batch that
loses all its records stays as an empty batch with the same offsets: it is a Raft entry):
- a follower is killed -9, 12 MB of updates to 40 keys (and tombstones) are written at acks=all;
  the leader and the other follower compact them;
- the follower restarts with its own cleaner off and catches up: the entries older than the
  4 MiB a leader keeps in memory come from the leader's *compacted* segments, so it holds far
  fewer records than were written; every replica then holds batches spanning exactly the same
  offsets;
- a consumer from the beginning reads every key's latest value (deleted keys: at most their
  tombstone), offsets increasing, far fewer records than were written;
- the leader is killed -9: the new leader serves the same latest values, and takes writes.
"""

from __future__ import annotations

import struct

import pytest

from clients import rd_producer
from test_cluster_metadata import NODE_ID_STRIDE, cluster, create, wait_until  # noqa: F401
from test_cluster_replication import count_records, leader_of, stored_batches
from test_compaction import high_watermark, read_all

TOPIC = "latest"
KEYS = 40
UPDATES = 300  # 12,000 records of ~1 KiB: three times a leader's 4 MiB entry cache
DELETED = {k for k in range(KEYS) if k % 9 == 4}
TOTAL = KEYS * UPDATES + len(DELETED)
CONFIG = {
    "cleanup.policy": "compact",
    "segment.ms": "300",
    "segment.bytes": str(256 << 10),
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "600000",
}


def key(k: int) -> bytes:
    return f"key-{k:03d}".encode()


def value(k: int, u: int) -> bytes:
    return f"value-{k:03d}-{u:03d}-".encode() + b"." * 1000


def spans(batches: bytes) -> list[tuple[int, int]]:
    """(base offset, last offset) of every stored batch."""
    out, pos = [], 0
    while pos < len(batches):
        base, length = struct.unpack_from(">qi", batches, pos)
        last_delta = struct.unpack_from(">i", batches, pos + 23)[0]
        out.append((base, base + last_delta))
        pos += 12 + length
    return out


def stored_records(b) -> int:
    return count_records(stored_batches(b.data_dir, TOPIC, 0))


def check_latest(bootstrap: str) -> int:
    """A consumer from the beginning reads every key's latest value; returns how many records
    it read."""
    got = read_all(bootstrap, TOPIC, timeout=60.0)
    offsets = [o for o, _, _ in got]
    assert offsets == sorted(set(offsets)), "offsets increase"
    latest = {}
    for _, k, v in got:
        latest[k] = v
    for k in range(KEYS):
        if k in DELETED:
            assert latest.get(key(k)) is None, f"key {k} was deleted"
        else:
            assert latest.get(key(k)) == value(k, UPDATES - 1), f"key {k}: not its latest value"
    return len(got)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("cluster", [{"log.cleaner.backoff.ms": "100", "log.retention.check.interval.ms": "100"}],
                         indirect=True)
def test_each_replica_compacts_and_a_follower_catches_up_from_compacted_segments(cluster):
    create(cluster[0].bootstrap, TOPIC, 1, replication_factor=3, config=CONFIG)
    leader, epoch = leader_of(cluster, TOPIC, 0)
    leader_b = cluster[leader // NODE_ID_STRIDE - 1]
    late = next(b for b in cluster if b is not leader_b)
    late._kill()
    up = [b for b in cluster if b is not late]

    p = rd_producer(",".join(b.bootstrap for b in up), acks="all", **{"linger.ms": 20, "batch.size": 1 << 20})
    for u in range(UPDATES):
        for k in range(KEYS):
            p.produce(TOPIC, key=key(k), value=value(k, u), partition=0)
        p.poll(0)
    for k in sorted(DELETED):
        p.produce(TOPIC, key=key(k), value=None, partition=0)
    assert p.flush(60) == 0, "produce did not complete"

    # The two live replicas compact on their own.
    wait_until("the live replicas compacted", lambda: all(stored_records(b) < TOTAL // 2 for b in up),
               timeout=60.0)
    assert all("log cleaned" in b.log_tail(1 << 20) for b in up)

    # The late follower, its own cleaner off, catches up: the entries older than the leader's
    # cache come from the leader's compacted segments, so it holds far fewer records than
    # were written without ever cleaning.
    late.settings["log.cleaner.enable"] = "false"
    late.start()
    assert high_watermark(",".join(b.bootstrap for b in up), TOPIC) == TOTAL
    def caught_up():
        held = stored_batches(late.data_dir, TOPIC, 0)
        return held != b"" and spans(held)[-1][1] == TOTAL - 1
    wait_until("the late follower caught up", caught_up, timeout=90.0)
    assert stored_records(late) < TOTAL // 2, f"{stored_records(late)} of {TOTAL}: sent uncompacted"
    assert "log cleaned" not in late.log_tail(1 << 20).split("===== start #2")[-1]
    # Every replica's batches span the same offsets: compaction emptied batches, never dropped
    # one, so the Raft entries line up on every replica.
    wait_until("the same batch offsets on every replica", lambda: len(
        {tuple(spans(stored_batches(b.data_dir, TOPIC, 0))) for b in cluster}) == 1, timeout=30.0)

    everyone = ",".join(b.bootstrap for b in cluster)
    read = check_latest(everyone)
    assert read < TOTAL // 2, f"{read} of {TOTAL} records read: not compacted"

    # The leader dies: the new leader serves the same latest values, and takes writes.
    leader, epoch = leader_of(cluster, TOPIC, 0)
    dead = cluster[leader // NODE_ID_STRIDE - 1]
    survivors = [b for b in cluster if b is not dead]
    dead._kill()
    leader_of(survivors, TOPIC, 0, epoch + 1)
    live = ",".join(b.bootstrap for b in survivors)
    check_latest(live)
    p = rd_producer(live, acks="all")
    p.produce(TOPIC, key=key(0), value=b"after", partition=0)
    assert p.flush(30) == 0
    assert high_watermark(live, TOPIC) == TOTAL + 1
    print(f"records stored after compaction: {[stored_records(b) for b in cluster]} of {TOTAL}; "
          f"a consumer read {read}")
