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

import time
from pathlib import Path

import kafka_wire as kw
from clients import kp_consume, rd_consume, rd_create_topic
from record_batches import CODECS, Batch, bomb, parse_produce_v8, produce_v8, produce_v8_body

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


def test_compressed_partitions_of_one_request_get_their_turn_after_a_long_walk(broker_factory, topic_name):
    """Regression, found when franz-go's suite wedged (2026-11-27): a core walks one compressed
    batch at a time (the decoder's window is held across its yields), and the broker checks a
    produce request's partitions side by side in one task. Two of them waiting for that turn
    from one task kept only the later one's place in the wake-up list, so when the turn came
    to the earlier one nobody woke it: the request never got an answer, and every compressed
    produce on that core queued behind it for good (franz-go: Produce i/o timeouts, an ETL
    consumer stuck in Produce missed its rebalance, "saw double offset").

    Here a 384 MiB gzip batch (accepted: under the 512 MiB decompression limit) holds the turn
    for a long walk while a request with two gzip partitions on the same core arrives; each
    must be answered, every round, and the core still takes compressed batches afterwards."""
    # 64 MiB batches: the decompression limit follows (8x: 512 MiB).
    broker = broker_factory({"message.max.bytes": str(64 << 20)}, cores=1)
    b = broker.bootstrap
    rd_create_topic(b, topic_name, 3)
    big, _ = bomb("gzip", 384 << 20)
    big_wire = big.encode()
    small = Batch.of(3)
    small.codec = CODECS["gzip"]
    small_wire = small.encode()
    for round_ in range(5):
        long_walk = kw.connect(b, timeout=60)
        side_by_side = kw.connect(b, timeout=30)
        try:
            long_walk.sendall(kw.frame(kw.API_PRODUCE, 8, 1, produce_v8_body(topic_name, [(0, big_wire)], timeout_ms=30_000)))
            time.sleep(0.02)  # the long walk has the core's turn now
            side_by_side.sendall(kw.frame(kw.API_PRODUCE, 8, 2, produce_v8_body(
                topic_name, [(1, small_wire), (2, small_wire)], timeout_ms=30_000)))
            started = time.monotonic()
            try:
                _, resp = kw.read_response(side_by_side, timeout=20)
            except (TimeoutError, OSError) as e:
                raise AssertionError(f"round {round_}: the two-partition request got no answer in 20 s "
                                     f"({e}): its partitions never got the core's inflate turn") from e
            assert {p: a.error for p, a in parse_produce_v8(resp).items()} == {1: 0, 2: 0}, f"round {round_}"
            print(f"round {round_}: two-partition request answered {time.monotonic() - started:.3f} s after it was sent")
            _, resp = kw.read_response(long_walk, timeout=60)
            assert {p: a.error for p, a in parse_produce_v8(resp).items()} == {0: 0}, f"round {round_}: the 384 MiB batch"
            print(f"round {round_}: the 384 MiB batch answered {time.monotonic() - started:.3f} s after it")
        finally:
            long_walk.close()
            side_by_side.close()
    assert produce_v8(b, topic_name, small_wire, partition=1).error == 0
    assert [r.offset for r in rd_consume(b, topic_name, [2], 15)][-1] == 14
