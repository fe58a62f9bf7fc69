#!/usr/bin/env python3
"""Produce CPU per GB before and after record validation (issue 34), in the same run.

Builds the broker of a given git revision (--before-rev, default the commit before validation
landed) into target/bench/before-<rev>/ (a git worktree; cargo, once), then alternates that
broker and this tree's target/release/weir, each started fresh with its defaults (all cores),
under the same load: `weir bench produce --client rdkafka` (librdkafka; this tree's binary as
the client for both) with --producers producers, --partitions partitions, 1 KiB records of
JSON-like text (`--payload text`: lz4 compresses it ~3:1, so a compressed batch has real work
to decompress), for each codec (none, lz4, zstd). Reports per broker and codec the medians and
ranges over --rounds rounds of client MB/s (record bytes) and the broker's CPU seconds per GB
of record bytes produced (utime + stime of the broker process, from /proc).

    cargo build --release --features rdkafka && python3 benches/validation_cpu.py [--rounds 3] [--seconds 8]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WEIR = ROOT / "target/release/weir"


def build_before(rev: str) -> Path:
    out = ROOT / "target/bench" / f"before-{rev}"
    binary = out / "target/release/weir"
    if binary.exists():
        return binary
    tree = out / "src"
    if not tree.exists():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), rev], check=True)
    subprocess.run(["cargo", "build", "--release"], cwd=tree, check=True,
                   env={**os.environ, "CARGO_TARGET_DIR": str(out / "target")})
    return binary


def start(binary: Path, tmp: Path) -> tuple[subprocess.Popen, str]:
    log = open(tmp / "weir.log", "w")
    proc = subprocess.Popen([str(binary), "serve", "--data-dir", str(tmp / "data"), "--listen", "127.0.0.1:0",
                             "--set", "metrics.listen=off"], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 30
    while time.time() < deadline:
        m = re.search(r"listening on (127\.0\.0\.1:\d+)", (tmp / "weir.log").read_text())
        if m:
            return proc, m.group(1)
        time.sleep(0.05)
    proc.kill()
    sys.exit("broker did not start: " + (tmp / "weir.log").read_text())


def run(binary: Path, codec: str, args) -> tuple[float, float]:
    with tempfile.TemporaryDirectory(dir=ROOT / "target/bench") as d:
        proc, bootstrap = start(binary, Path(d))
        try:
            out = Path(d) / "out.json"
            cmd = [str(WEIR), "bench", "produce", "--bootstrap", bootstrap, "--broker-pid", str(proc.pid),
                   "--client", "rdkafka", "--producers", str(args.producers), "--partitions", str(args.partitions),
                   "--duration", str(args.seconds), "--payload", "text", "--raw-secs", "1",
                   "--work-dir", str(Path(d) / "bench"), "--json", str(out)]
            if codec != "none":
                cmd += ["--rd-set", f"compression.type={codec}"]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            figures = {(f["name"], f["unit"]): f["value"] for f in json.loads(out.read_text())["figures"]}
            assert figures[("produce errors", "records")] == 0
            return figures[("weir produce", "MB/s")], figures[("broker CPU per GB produced", "s/GB")]
        finally:
            proc.kill()
            proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before-rev", default="37b6474")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--producers", type=int, default=2)
    ap.add_argument("--partitions", type=int, default=4)
    args = ap.parse_args()
    (ROOT / "target/bench").mkdir(parents=True, exist_ok=True)
    brokers = {"before": build_before(args.before_rev), "after": WEIR}
    results: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for r in range(args.rounds):
        for codec in ("none", "lz4", "zstd"):
            for name, binary in brokers.items():
                mbs, cpu = run(binary, codec, args)
                results.setdefault((name, codec), []).append((mbs, cpu))
                print(f"round {r} {codec:5} {name:6} {mbs:7.1f} MB/s  {cpu:.3f} s/GB", flush=True)
    print()
    print("| codec | broker | MB/s median (range) | broker CPU s/GB median (range) |")
    print("|---|---|---|---|")
    for codec in ("none", "lz4", "zstd"):
        for name in brokers:
            xs = results[(name, codec)]
            m = [x[0] for x in xs]
            c = [x[1] for x in xs]
            print(f"| {codec} | {name} ({args.before_rev if name == 'before' else 'this tree'}) "
                  f"| {statistics.median(m):.0f} ({min(m):.0f}-{max(m):.0f}) "
                  f"| {statistics.median(c):.3f} ({min(c):.3f}-{max(c):.3f}) |")


if __name__ == "__main__":
    main()
