#!/usr/bin/env python3
"""End-to-end latency with and without a log cleaning running on the same core (issue 17).

Starts `weir serve` pinned to ONE cpu (taskset), so the cleaner and the measured produce ->
consume path share a core (the worst case), fills a compacted topic with keyed updates while
compaction is held back (`min.compaction.lag.ms` = 1 h), then runs `weir bench consume-tail`
(fixed offered rate, e2e latency) against it. In the "cleaning" run, a few seconds into the
measurement, the topic's `min.compaction.lag.ms` is set to 0 (IncrementalAlterConfigs), so the
cleaner rewrites the whole topic during the measurement; the "idle" run changes nothing. Same
fill, same rate, same duration.

    python3 benches/compaction_latency.py --fill-mib 512 --rate 2000 --duration 20

Prints both runs' e2e percentiles, and the cleaning's size and duration from the broker log.
Needs confluent-kafka (scripts/requirements-test.txt) and a release build.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import confluent_kafka
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

ROOT = Path(__file__).resolve().parent.parent


def start(weir: str, work: Path, extra: list[str]) -> tuple[subprocess.Popen, str]:
    log = open(work / "weir.log", "w")
    out = work / "weir.out"
    proc = subprocess.Popen(
        ["taskset", "-c", "0", weir, "serve", "--listen", "127.0.0.1:0", "--data-dir", str(work / "data"),
         "--set", "metrics.listen=127.0.0.1:0", "--set", "log.cleaner.backoff.ms=200",
         "--set", "log.retention.check.interval.ms=200", "--set", "listeners.per.core=false"]
        + [a for kv in extra for a in ("--set", kv)],
        stdout=open(out, "w"), stderr=log)
    for _ in range(200):
        m = re.search(r"listening on (\S+)", out.read_text())
        if m:
            return proc, m.group(1)
        time.sleep(0.05)
    proc.kill()
    raise SystemExit("weir did not start:\n" + (work / "weir.log").read_text())


def fill(bootstrap: str, topic: str, mib: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={
        "cleanup.policy": "compact", "segment.bytes": str(64 << 20), "segment.ms": "1000",
        "min.compaction.lag.ms": "3600000", "min.cleanable.dirty.ratio": "0.01"})])[topic].result(30)
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20,
                                  "compression.type": "none", "acks": "1"})
    value = bytes(range(256)) * 4
    for i in range(mib * 1024):
        while True:
            try:
                p.produce(topic, key=f"key-{i % 20000}".encode(), value=value, partition=0)
                break
            except BufferError:
                p.poll(0.05)
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(120) == 0
    time.sleep(2)  # segment.ms rolls the last segment: everything is closed and cleanable


def release_compaction(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource("TOPIC", topic, incremental_configs=[
        ConfigEntry("min.compaction.lag.ms", "0", incremental_operation=AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([res]).values():
        f.result(30)


def run(weir: str, args, clean: bool) -> dict:
    work = Path(tempfile.mkdtemp(prefix="weir-compaction-bench-", dir=ROOT / "target"))
    proc, bootstrap = start(weir, work, args.set)
    try:
        fill(bootstrap, "compacted", args.fill_mib)
        released = None
        measuring = threading.Event()
        bench = subprocess.Popen(
            [weir, "bench", "consume-tail", "--bootstrap", bootstrap, "--broker-pid", str(proc.pid),
             "--rate", str(args.rate), "--duration", str(args.duration), "--fetch", "long-poll",
             "--partitions", "1", "--raw-secs", "1", "--work-dir", str(work / "bench")],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        err_lines: list[str] = []

        def watch():
            for line in bench.stderr:
                err_lines.append(line)
                if "tail (" in line:
                    measuring.set()
        threading.Thread(target=watch, daemon=True).start()
        if not measuring.wait(300):
            raise SystemExit("the bench never reached its measured phase:\n" + "".join(err_lines))
        t0 = time.time()
        if clean:
            time.sleep(args.release_after)
            release_compaction(bootstrap, "compacted")
            released = time.time()
        out, _ = bench.communicate(timeout=args.duration + 300)
        t1 = time.time()
        if bench.returncode != 0:
            raise SystemExit(f"weir bench failed:\n{out}\n{''.join(err_lines)}")
        bench = subprocess.CompletedProcess(bench.args, 0, out, "")
        cleaned = [l for l in (work / "weir.log").read_text().splitlines() if "log cleaned" in l]
        return {"bench": bench.stdout, "cleaned": cleaned, "released": released, "t0": t0, "t1": t1}
    finally:
        proc.terminate()
        proc.wait(30)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def e2e_lines(out: str) -> list[str]:
    return [l.strip() for l in out.splitlines() if re.search(r"e2e|p99|p50", l)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weir", default=str(ROOT / "target" / "release" / "weir"))
    ap.add_argument("--fill-mib", type=int, default=512)
    ap.add_argument("--rate", type=int, default=2000)
    ap.add_argument("--duration", type=int, default=20)
    ap.add_argument("--release-after", type=float, default=4.0, help="seconds into the run")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="broker setting, e.g. log.cleaner.io.max.bytes.per.second=52428800")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    if shutil.which("taskset") is None:
        sys.exit("taskset (util-linux) is needed")
    for clean in (False, True):
        r = run(args.weir, args, clean)
        print(f"=== {'cleaning during the run' if clean else 'idle (no cleaning)'} ===")
        for l in e2e_lines(r["bench"]):
            print("  " + l)
        if clean:
            print(f"  compaction released {r['released'] - r['t0']:.1f} s into the measured phase "
                  f"({args.duration} s; the bench ended {r['t1'] - r['t0']:.1f} s after it began)")
        for l in r["cleaned"]:
            print("  broker: " + l[:300])


if __name__ == "__main__":
    main()
