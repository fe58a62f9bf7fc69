"""sarama (the Go client, github.com/IBM/sarama) against weir: retention must not delete its
fresh records (issue 34).

What broke: every sarama release before v1.45.1 (2025, IBM/sarama#3108 "produce: set
MaxTimestamp") leaves the `max_timestamp` field of the record batches it produces unset, so the
header says -1. weir trusted that header: a segment full of sarama batches counted as last
written at -1 ms, so the first retention pass after it rolled deleted it, whatever
`retention.ms` said (48 of 60 fresh records were gone 20 s after they were written, with
`retention.ms` at an hour), and ListOffsets by timestamp skipped such segments. Kafka itself
never trusts the field: its LogValidator recomputes it from the records, and weir now does too.

How this test reproduces it: tests/go/sarama_producer (a small Go program pinned to sarama
v1.45.0, built here with `go build` into tests/go/.bin/) produces 300 records stamped 10 to 5
minutes ago, about 225 bytes each, into a topic with `retention.ms` = 1 h, `segment.bytes` =
16 KiB and `segment.ms` = 2 s, on a broker whose retention runs every 500 ms: the records span
five segments, and once the last one rolls every record sits in a sealed segment that a broker
believing the headers would delete at once. After a few retention passes, every record must
still be there from offset 0, the log start offset must still be 0, and ListOffsets by
timestamp must find records in every segment. The Go program also sees the bytes sarama writes
(its dialer wraps the connections) and reports each batch's header: the test checks that sarama
really sent max_timestamp -1, and that the batches weir serves back carry the records' true
max (weir rewrote the field, and the CRC with it). An uncompressed, an lz4 and an idempotent
zstd variant: for compressed batches the true max is only known after decompressing.

Needs the Go toolchain (`go`); the build fetches sarama and its dependencies from the Go module
proxy the first time (about 40 s with an empty Go cache), then takes a second.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
from pathlib import Path

import pytest
from conftest import go_build
from confluent_kafka import TopicPartition
from kafka.record.memory_records import MemoryRecords

import kafka_wire as kw
from clients import now_ms, rd_consume, rd_consumer, rd_create_topic

GO_DIR = Path(__file__).resolve().parent / "go"
PRODUCER_DIR = GO_DIR / "sarama_producer"
# The sarama version go.mod pins: the last release that writes max_timestamp -1.
SARAMA_VERSION = "v1.45.0"
GO_BUILD_TIMEOUT_S = 600  # the first build downloads sarama and its dependencies

N = 300
PAD = 200  # filler bytes per value: ~225-byte records, five 16 KiB segments
STEP_MS = 1000
SEGMENT_BYTES = 16384
RETENTION_CHECK_MS = 500
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


@pytest.fixture(scope="session")
def sarama_producer() -> Path:
    """tests/go/.bin/sarama_producer, built from tests/go/sarama_producer (go.mod and go.sum pin
    sarama; the modules come from the Go module proxy, once, into Go's module cache)."""
    return go_build(PRODUCER_DIR, "sarama_producer", GO_BUILD_TIMEOUT_S)


def produce(binary: Path, bootstrap: str, topic: str, t0: int, compression: str, idempotent: bool) -> dict:
    """Runs the sarama producer; its JSON answer (acked, and the batches it sent)."""
    cmd = [str(binary), "-brokers", bootstrap, "-topic", topic, "-count", str(N), "-timestamp-ms", str(t0),
           "-timestamp-step-ms", str(STEP_MS), "-pad", str(PAD), "-compression", compression, "-capture"]
    if idempotent:
        cmd.append("-idempotent")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (f"sarama producer: exit {proc.returncode}\n"
                                  f"stdout: {proc.stdout[-4000:]}\nstderr: {proc.stderr[-8000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def value_of(i: int) -> bytes:
    """What the Go program sends as record i's value: "v<i>|" and PAD bytes of
    sha256("<i>/0") + sha256("<i>/1") + ..."""
    filler = b"".join(hashlib.sha256(f"{i}/{j}".encode()).digest() for j in range(PAD // 32 + 1))
    return f"v{i}|".encode() + filler[:PAD]


def fetch_batches(bootstrap: str, topic: str, end: int) -> list:
    """Every record batch of partition 0 up to `end`, as weir serves it (Fetch v4), decoded by
    kafka-python."""
    batches, offset = [], 0
    sock = kw.connect(bootstrap)
    try:
        for corr in range(1, 100):
            if offset >= end:
                return batches
            sock.sendall(kw.fetch(corr, topic, 0, offset, max_bytes=8 << 20))
            _, body = kw.read_response(sock)
            (part,) = kw.parse_fetch_v4(body)
            assert part["error"] == 0, f"Fetch at {offset}: error {part['error']}"
            records = MemoryRecords(part["records"])
            while (batch := records.next_batch()) is not None:
                batches.append(batch)
                offset = batch.next_offset
    finally:
        sock.close()
    raise AssertionError(f"fetched up to offset {offset} of {end} in 99 Fetches")


def segment_files(broker, topic: str) -> list[Path]:
    return sorted((broker.data_dir / f"{topic}-0").glob("*.log"))


@pytest.mark.timeout(GO_BUILD_TIMEOUT_S + 180)
@pytest.mark.parametrize("compression,idempotent", [("none", False), ("lz4", False), ("zstd", True)],
                         ids=["none", "lz4", "zstd-idempotent"])
def test_retention_keeps_fresh_sarama_records(sarama_producer, broker_factory, topic_name, compression,
                                              idempotent):
    b = broker_factory(settings={"log.retention.check.interval.ms": RETENTION_CHECK_MS})
    rd_create_topic(b.bootstrap, topic_name, 1, config={"retention.ms": "3600000",
                                                         "segment.bytes": str(SEGMENT_BYTES),
                                                         "segment.ms": "2000"})
    t0 = now_ms() - 600_000  # record i: t0 + i s, 10 to 5 minutes ago; retention.ms is 1 h
    out = produce(sarama_producer, b.bootstrap, topic_name, t0, compression, idempotent)
    assert out["sarama"] == SARAMA_VERSION, f"built with sarama {out['sarama']}"
    assert out["acked"] == N, out

    # sarama itself sent max_timestamp -1 in every batch: this is the producer of the bug.
    sent = out["batches"]
    assert sent, "the Go program captured no Produce request"
    assert {s["codec"] for s in sent} == {CODECS[compression]}
    assert sum(s["records"] for s in sent) >= N
    wrong = [s for s in sent if s["max_timestamp"] != s["true_max_timestamp"]]
    assert len(wrong) == len(sent) and {s["max_timestamp"] for s in sent} == {-1}, (
        f"sarama {out['sarama']} is expected to write max_timestamp -1 in every batch; got "
        f"{[(s['max_timestamp'], s['true_max_timestamp']) for s in sent[:5]]}")
    if idempotent:
        assert all(s["producer_id"] >= 0 for s in sent), "an idempotent sarama batch without a producer id"

    # The last segment rolls (segment.ms) at a retention pass: then every record is in a sealed
    # segment, which a broker that believed the headers would delete at once.
    deadline = time.monotonic() + 15
    while not (b.data_dir / f"{topic_name}-0" / f"{N:020d}.log").exists():
        assert time.monotonic() < deadline, (
            f"the segment holding offset {N - 1} did not roll within 15 s of segment.ms=2000: "
            f"{[p.name for p in segment_files(b, topic_name)]}")
        time.sleep(0.1)
    time.sleep(3 * RETENTION_CHECK_MS / 1000 + 0.5)  # three more retention passes
    b.check_alive()

    files = segment_files(b, topic_name)
    assert files[0].name == f"{0:020d}.log", f"the first segment is gone: {[p.name for p in files]}"
    sealed = [p for p in files if p.stat().st_size > 0]
    assert len(sealed) >= 4, f"records in only {len(sealed)} segments: {[p.name for p in files]}"

    c = rd_consumer(b.bootstrap)
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=10, cached=False)
    finally:
        c.close()
    assert (low, high) == (0, N), f"log start offset moved: watermarks ({low}, {high})"

    got = rd_consume(b.bootstrap, topic_name, [0], N, offset=0, extra_wait=0.2)
    assert [r.offset for r in got] == list(range(N))
    for i, r in enumerate(got):
        assert (r.key, r.value, r.timestamp) == (f"k{i}".encode(), value_of(i), t0 + i * STEP_MS), (
            f"record {i}: key {r.key!r}, value {r.value[:12]!r}..., timestamp {r.timestamp}")

    # What weir serves: the batches sarama sent, each header's max_timestamp now the records'
    # true max (and a CRC that covers it).
    served = fetch_batches(b.bootstrap, topic_name, N)
    by_first = {s["first_timestamp"]: s for s in sent}
    assert sum(batch.records_count for batch in served) == N
    for batch in served:
        crc_ok = batch.validate_crc()  # before iterating: kafka-python decompresses in place
        recs = list(batch)
        true_max = max(r.timestamp for r in recs)
        where = f"batch at offset {batch.base_offset} ({len(recs)} records)"
        assert crc_ok, f"{where}: bad CRC"
        assert batch.compression_type == CODECS[compression], where
        assert batch.max_timestamp == true_max, f"{where}: max_timestamp {batch.max_timestamp}, want {true_max}"
        s = by_first.get(batch.first_timestamp)
        assert s is not None, f"{where}: no batch sarama sent starts at {batch.first_timestamp}"
        assert (s["records"], s["true_max_timestamp"], s["max_timestamp"]) == (len(recs), true_max, -1), (
            f"{where}: sarama sent {s}")

    # ListOffsets by timestamp: the first record stamped at or after the time asked, in every
    # segment (a broker that believed the headers skipped every sarama segment), compressed
    # batches included (decompressed to find the record, as Kafka does).
    c = rd_consumer(b.bootstrap)
    try:
        for i in (0, 75, 150, 225, N - 1):
            want = i
            for ts in (t0 + i * STEP_MS - STEP_MS // 2, t0 + i * STEP_MS):
                [tp] = c.offsets_for_times([TopicPartition(topic_name, 0, ts)], timeout=10)
                assert tp.error is None and tp.offset == want, (
                    f"offsets_for_times({ts} = t0 + {ts - t0} ms): offset {tp.offset} (error {tp.error}), "
                    f"want {want} (record {i})")
    finally:
        c.close()
