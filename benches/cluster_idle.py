#!/usr/bin/env python3
"""What an idle cluster costs per partition (issue 19, docs/replication.md §5.3): the CPU three
brokers burn with N replicated partitions and no client traffic at all, as N grows.

Starts a cluster of three `weir serve` processes (target/release/weir; WEIR_BIN overrides), each
--cores C (default 2), on 127.0.0.1 (port 0 for clients, free ports for --peers), data under
--data (default target/bench/cluster-idle). For each count of --counts (cumulative: a step adds
partitions to reach the count, as topics of --per-topic partitions at replication factor 3),
once every partition is led and the leaders settled (--settle s): each broker's CPU (utime +
stime from /proc) over --window s of idleness, as % of one CPU, and the machine's busy share
(/proc/stat) beside it. Every step also checks that every partition still has a leader, so a
change that quiets the cluster by letting groups lose their leaders shows up as a failure, not
as a saving.

Output: one line per count, then a table (also in --out/cluster_idle.json): % of a CPU per broker
(median of the three [min-max]) and per 1,000 partitions.

    cargo build --release && python3 benches/cluster_idle.py [--counts 0,100,300,1000]
        [--cores 2] [--window 10] [--settle 5]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from replication import (NODE_ID_STRIDE, ROOT, WEIR, Broker, consumer, free_ports, log, machine_cpu,
                         wait_for)


def all_led(c, topics: list[str]) -> bool:
    md = c.list_topics(timeout=20)
    for t in topics:
        tm = md.topics.get(t)
        if tm is None or tm.error is not None or not tm.partitions:
            return False
        if any(p.leader < 0 for p in tm.partitions.values()):
            return False
    return True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--counts", default="0,100,300,1000")
    ap.add_argument("--per-topic", type=int, default=50)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--window", type=float, default=10.0)
    ap.add_argument("--settle", type=float, default=5.0)
    ap.add_argument("--data", type=Path, default=ROOT / "target" / "bench" / "cluster-idle")
    ap.add_argument("--out", type=Path, default=ROOT / "target" / "bench" / "cluster-idle-out")
    a = ap.parse_args()
    counts = [int(x) for x in a.counts.split(",")]
    if not WEIR.is_file():
        sys.exit(f"{WEIR} does not exist: cargo build --release")
    data = a.data.resolve()
    if data.exists():
        shutil.rmtree(data)
    data.mkdir(parents=True)
    a.out.mkdir(parents=True, exist_ok=True)

    ports = free_ports(3)
    voters = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(ports))
    cluster = [Broker(f"b{i + 1}", data, a.cores, ["--node-id", str(i + 1), "--peers", voters,
                                                  "--set", "security.inter.broker.protocol=PLAINTEXT"])
               for i in range(3)]
    results = []
    try:
        c = consumer(",".join(b.bootstrap for b in cluster))
        every_node = {b * NODE_ID_STRIDE + core for b in (1, 2, 3) for core in range(a.cores)}
        wait_for("every broker registered", lambda: every_node <= set(c.list_topics(timeout=10).brokers))
        admin = AdminClient({"bootstrap.servers": cluster[0].bootstrap})
        topics: list[str] = []
        have = 0
        for count in counts:
            while have < count:
                n = min(a.per_topic, count - have)
                name = f"idle-{len(topics)}"
                admin.create_topics([NewTopic(name, num_partitions=n, replication_factor=3)],
                                    request_timeout=30)[name].result(60)
                topics.append(name)
                have += n
            wait_for(f"{have} partitions led", lambda: all_led(c, topics), timeout=120)
            time.sleep(a.settle)
            before = [b.cpu() for b in cluster]
            busy0, idle0 = machine_cpu()
            t0 = time.monotonic()
            time.sleep(a.window)
            secs = time.monotonic() - t0
            after = [b.cpu() for b in cluster]
            busy1, idle1 = machine_cpu()
            for b in cluster:
                b.check_alive()
            led = all_led(c, topics)
            per_broker = [100.0 * (y - x) / secs for x, y in zip(before, after)]
            machine = 100.0 * (busy1 - busy0) / max((busy1 - busy0) + (idle1 - idle0), 1e-9)
            row = {"partitions": have, "cpu_pct_per_broker": per_broker,
                   "median_pct": statistics.median(per_broker), "machine_busy_pct": machine,
                   "all_led_after": led}
            results.append(row)
            log(f"{have:>5} partitions RF 3: broker CPU % of one core "
                + ", ".join(f"{p:.1f}" for p in per_broker)
                + f" (machine busy {machine:.1f} %); every partition led after: {led}")
            if not led:
                sys.exit("a partition lost its leader while idle")
    finally:
        for b in cluster:
            b.stop()
    (a.out / "cluster_idle.json").write_text(json.dumps(
        {"cmd": "python3 benches/cluster_idle.py " + " ".join(sys.argv[1:]), "cores": a.cores,
         "window_s": a.window, "results": results}, indent=2))
    log("\n| partitions (RF 3) | CPU per broker, % of one core: median [min-max] | per 1,000 partitions |")
    log("|---|---|---|")
    for r in results:
        per = r["cpu_pct_per_broker"]
        per_k = f"{1000 * r['median_pct'] / r['partitions']:.1f} %" if r["partitions"] else "—"
        log(f"| {r['partitions']:,} | {r['median_pct']:.1f} [{min(per):.1f}-{max(per):.1f}] | {per_k} |")


if __name__ == "__main__":
    main()
