#!/usr/bin/env python3
"""Compression bombs vs another client on the same core (issue 34).

Starts its own one-core weir broker (target/release/weir) in a temp dir under target/. A
librdkafka producer (acks=1, linger 0, 1 KiB records at --rate records/s, one partition)
measures each record's send-to-acknowledgement latency, in alternating phases of --seconds:
quiet, then with a second client sending compression bombs back to back (raw Produce v8: gzip,
zstd and lz4 batches of valid records that inflate to 4 GiB, 4 GiB and 1 GiB, a raw snappy one
announcing 4 GiB, a xerial snappy one of 160 MiB; to a compacted topic), all refused by the
validator at `message.max.decompressed.bytes` (64 MiB with the defaults). Rounds alternate
quiet/bombs --rounds times. Reports per phase: the latency client's p50 / p99 / p99.9 / max,
the bombs refused, and the broker's CPU time. (Memory is tests/test_compression_bombs.py's to
check: here the core's cache also holds the latency client's records.)

    cargo build --release && python3 benches/bombs.py [--rounds 3] [--seconds 8] [--rate 1000]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from record_batches import bomb, produce_v8  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")
GiB = 1 << 30
BOMBS = [("gzip", 4 * GiB), ("zstd", 4 * GiB), ("lz4", GiB), ("snappy-raw", 4 * GiB - 1), ("snappy-xerial", 160 << 20)]


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def start(tmp: Path) -> tuple[subprocess.Popen, str]:
    log = open(tmp / "weir.log", "w")
    proc = subprocess.Popen([str(ROOT / "target/release/weir"), "serve", "--data-dir", str(tmp / "data"),
                             "--cores", "1", "--listen", "127.0.0.1:0", "--set", "metrics.listen=off"],
                            stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 30
    while time.time() < deadline:
        m = re.search(r"listening on (127\.0\.0\.1:\d+)", (tmp / "weir.log").read_text())
        if m:
            return proc, m.group(1)
        time.sleep(0.05)
    proc.kill()
    sys.exit("broker did not start")


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def phase(producer: Producer, topic: str, seconds: float, rate: int) -> list[float]:
    lat: list[float] = []
    value = b"x" * 1024
    interval = 1.0 / rate
    t_end = time.monotonic() + seconds
    next_at = time.monotonic()
    while time.monotonic() < t_end:
        t0 = time.monotonic()

        def cb(err, msg, t0=t0):
            assert err is None, err
            lat.append((time.monotonic() - t0) * 1000)

        producer.produce(topic, value, partition=0, on_delivery=cb)
        next_at += interval
        while True:
            producer.poll(0)
            wait = next_at - time.monotonic()
            if wait <= 0:
                break
            producer.poll(min(wait, 0.001))
    producer.flush(30)
    return lat


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--rate", type=int, default=1000)
    args = ap.parse_args()
    (ROOT / "target").mkdir(exist_ok=True)
    bombs = [bomb(kind, size)[0].encode() for kind, size in BOMBS]
    with tempfile.TemporaryDirectory(dir=ROOT / "target") as d:
        proc, bootstrap = start(Path(d))
        try:
            admin = AdminClient({"bootstrap.servers": bootstrap})
            fs = admin.create_topics([NewTopic("latency", 1, 1), NewTopic("bombed", 1, 1,
                                                                         config={"cleanup.policy": "compact"})])
            for f in fs.values():
                f.result(30)
            producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 0,
                                 "enable.idempotence": False})
            phase(producer, "latency", 2.0, args.rate)  # warm up: metadata known, connection open
            rows = []
            for r in range(args.rounds):
                for bombing in (False, True):
                    stop = threading.Event()
                    sent = [0]

                    def send():
                        while not stop.is_set():
                            for wire in bombs:
                                a = produce_v8(bootstrap, "bombed", wire, timeout=60)
                                assert a.error == 87, a
                                sent[0] += 1
                                if stop.is_set():
                                    return

                    t = threading.Thread(target=send) if bombing else None
                    c0 = cpu_s(proc.pid)
                    if t:
                        t.start()
                    lat = phase(producer, "latency", args.seconds, args.rate)
                    stop.set()
                    if t:
                        t.join()
                    rows.append((r, bombing, pct(lat, 0.5), pct(lat, 0.99), pct(lat, 0.999), max(lat), sent[0],
                                 cpu_s(proc.pid) - c0))
        finally:
            proc.kill()
    print("| round | phase | p50 ms | p99 ms | p99.9 ms | max ms | bombs refused | broker CPU s |")
    print("|---|---|---|---|---|---|---|---|")
    for r, bombing, p50, p99, p999, mx, sent, cpu in rows:
        print(f"| {r} | {'bombs' if bombing else 'quiet'} | {p50:.2f} | {p99:.2f} | {p999:.2f} | {mx:.1f} | {sent} "
              f"| {cpu:.2f} |")
    for bombing in (False, True):
        p99s = [row[3] for row in rows if row[1] == bombing]
        print(f"median p99 {'bombs' if bombing else 'quiet'}: {statistics.median(p99s):.2f} ms")


if __name__ == "__main__":
    main()
