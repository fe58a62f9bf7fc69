"""Compression bombs are refused with bounded memory (issue 34).

Before: on a compacted topic the produce path decompressed a whole batch in memory to look for
keyless records — a 1.04 MB gzip batch of 1 GiB of zeros cost +2 GB RSS and a 7.5 s stall of
every other client on that core, and one 131 KB zstd batch that inflates to 4 GiB aborted the
broker (`memory allocation of 8589934592 bytes failed`). Now every batch is walked record by
record through a bounded streaming decoder (storage `batch::validate`), on every topic, and one
that inflates past `message.max.decompressed.bytes` is refused with INVALID_RECORD, nothing
written.

Each bomb here is made of valid, keyed records with values of zeros (so that only the size
gives it away), 1 GiB and 4 GiB for gzip, zstd and lz4, to a compacted and to a delete topic on
a one-core broker. Snappy compresses at most ~21:1, so a snappy bomb is either the raw kind
librdkafka's framing allows — a header announcing 1 GiB or 4 GiB, refused before anything is
allocated — or a xerial (Java) one as large as the test's 20 MiB `message.max.bytes` holds (384 MiB). The broker's peak RSS (VmHWM) may
grow by less than 64 MiB over all of them. How much another client's latency on the same core
moves meanwhile is measured by benches/bombs.py (reported in docs/bench.md), not asserted here.
"""

from __future__ import annotations

from pathlib import Path

from clients import kp_consume, rd_consume, rd_create_topic
from record_batches import Batch, bomb, produce_v8

INVALID_RECORD = 87
GiB = 1 << 30
BOMBS = [("gzip", GiB), ("gzip", 4 * GiB), ("zstd", GiB), ("zstd", 4 * GiB), ("lz4", GiB), ("lz4", 4 * GiB),
         ("snappy-raw", GiB), ("snappy-raw", 4 * GiB - 1), ("snappy-xerial", 384 << 20)]


def peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def test_bombs_are_refused_and_memory_stays_bounded(broker_factory, topic_name):
    # 20 MiB batches, so that the 4 GiB lz4 bomb (16 MB: lz4 compresses at most ~255:1) is
    # read at all; the decompression limit follows (8x: 160 MiB).
    broker = broker_factory({"message.max.bytes": str(20 << 20)}, cores=1)
    b = broker.bootstrap
    topics = {"compact": f"{topic_name}-compact", "delete": f"{topic_name}-delete"}
    for policy, t in topics.items():
        rd_create_topic(b, t, 1, config={"cleanup.policy": policy})
        assert produce_v8(b, t, Batch.of(1).encode()).error == 0
    before = peak_rss(broker.pid)
    for kind, size in BOMBS:
        batch, _ = bomb(kind, size)
        wire = batch.encode()
        for policy, t in topics.items():
            answer = produce_v8(b, t, wire, timeout=60)
            assert answer.error == INVALID_RECORD, f"{kind} {size >> 20} MiB to a {policy} topic: {answer}"
            assert "decompresses to more than" in (answer.message or ""), answer.message
    grown = peak_rss(broker.pid) - before
    print(f"peak RSS grew by {grown / (1 << 20):.1f} MiB over {2 * len(BOMBS)} bombs")
    assert grown < 64 << 20, f"peak RSS grew by {grown >> 20} MiB"
    # Nothing was written; the broker and the partitions are fine.
    for t in topics.values():
        assert [r.offset for r in rd_consume(b, t, [0], 1)] == [0]
        assert [r.offset for r in kp_consume(b, t, [0], 1)] == [0]
        assert produce_v8(b, t, Batch.of(2).encode()).base_offset == 1
