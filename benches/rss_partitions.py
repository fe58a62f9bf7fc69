#!/usr/bin/env python3
"""Broker memory with many partitions: RSS of a real `weir serve` holding N partitions.

Starts the broker (release binary; WEIR_BIN overrides) on a fresh data dir under target/,
creates N partitions (in topics of 1,000), produces one small message to every partition
with confluent-kafka, then reads the broker's VmRSS/VmHWM from /proc/PID/status: at start,
after the creates, after the produce, and after two retention checks (idle partitions
release their write buffers). Prints one JSON object; exits 1 if the per-partition RSS
growth passes --bound-kib (see docs/bench.md for the documented bound).

    python3 benches/rss_partitions.py --partitions 10000 [--bound-kib 64]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

REPO = Path(__file__).resolve().parent.parent
LISTENING_RE = re.compile(rb"listening on (127\.0\.0\.1):(\d+)")
PER_TOPIC = 1000


def status(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(rest.split()[0]) * 1024
    return out


def start(binary: Path, workdir: Path, check_ms: int) -> tuple[subprocess.Popen, str, Path]:
    log_path = workdir / "weir.log"
    log = open(log_path, "wb")
    cmd = [str(binary), "serve", "--listen", "127.0.0.1:0",
           "--set", "metrics.listen=127.0.0.1:0",
           "--set", f"log.retention.check.interval.ms={check_ms}"]
    proc = subprocess.Popen(cmd, cwd=workdir, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 30
    while time.time() < deadline:
        m = LISTENING_RE.search(log_path.read_bytes())
        if m:
            return proc, f"{m.group(1).decode()}:{m.group(2).decode()}", log_path
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise SystemExit(f"broker did not start; log:\n{log_path.read_text()[-4000:]}")


def measure(binary: Path, partitions: int, check_ms: int = 1000) -> dict:
    root = REPO / "target" / "bench-rss"
    root.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="rss-", dir=root))
    proc, bootstrap, _ = start(binary, workdir, check_ms)
    try:
        time.sleep(0.5)
        result: dict = {"partitions": partitions, "start": status(proc.pid)}
        admin = AdminClient({"bootstrap.servers": bootstrap})
        topics = []
        left = partitions
        while left > 0:
            n = min(PER_TOPIC, left)
            topics.append((f"rss-{len(topics)}", n))
            left -= n
        t0 = time.time()
        futs = admin.create_topics([NewTopic(t, n, 1) for t, n in topics], operation_timeout=120)
        for f in futs.values():
            f.result(timeout=300)
        result["create_s"] = round(time.time() - t0, 1)
        result["created"] = status(proc.pid)
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50,
                             "queue.buffering.max.messages": 1_000_000})
        errors = []
        t0 = time.time()
        for t, n in topics:
            for p in range(n):
                producer.produce(t, value=b"x" * 100, partition=p,
                                 on_delivery=lambda e, m: errors.append(e) if e else None)
                producer.poll(0)
        left = producer.flush(300)
        assert left == 0 and not errors, f"{left} undelivered, errors {errors[:3]}"
        result["produce_s"] = round(time.time() - t0, 1)
        result["produced"] = status(proc.pid)
        time.sleep(2.5 * check_ms / 1000 + 1)  # two retention checks: idle buffers released
        result["idle"] = status(proc.pid)
        grow = result["idle"]["VmRSS"] - result["start"]["VmRSS"]
        result["rss_growth_per_partition_kib"] = round(grow / partitions / 1024, 1)
        grow_peak = result["idle"]["VmHWM"] - result["start"]["VmRSS"]
        result["peak_growth_per_partition_kib"] = round(grow_peak / partitions / 1024, 1)
        return result
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(workdir, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--bound-kib", type=float, default=None,
                    help="fail if peak RSS growth per partition passes this many KiB")
    args = ap.parse_args()
    binary = Path(os.environ.get("WEIR_BIN", REPO / "target" / "release" / "weir"))
    r = measure(binary, args.partitions)
    print(json.dumps(r, indent=1))
    if args.bound_kib is not None and r["peak_growth_per_partition_kib"] > args.bound_kib:
        print(f"over the bound: {r['peak_growth_per_partition_kib']} KiB > {args.bound_kib} KiB per partition",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
