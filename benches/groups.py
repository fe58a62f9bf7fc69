#!/usr/bin/env python3
"""Consumer-group benchmark (issue 4): offset-commit throughput with 1, 10 and 100 concurrent
committers, and the time a group of 10 members takes to rebalance.

Starts its own weir broker (target/release/weir) in a temp dir under target/, or uses
--bootstrap HOST:PORT (any Kafka broker). Uses confluent-kafka (librdkafka), as the test suite.

    cargo build --release && python3 benches/groups.py [--seconds 5] [--bootstrap HOST:PORT]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parent.parent


def start_broker() -> tuple[subprocess.Popen, str]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-groups-", dir=ROOT / "target"))
    log = open(tmp / "weir.log", "w")
    proc = subprocess.Popen([str(ROOT / "target/release/weir"), "serve", "--data-dir", str(tmp / "data"),
                             "--listen", "127.0.0.1:0", "--set", "metrics.listen=127.0.0.1:0"], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 30
    while time.time() < deadline:
        m = re.search(r"listening on 127\.0\.0\.1:(\d+)", (tmp / "weir.log").read_text())
        if m:
            return proc, f"127.0.0.1:{m.group(1)}"
        time.sleep(0.05)
    proc.kill()
    sys.exit("broker did not start")


def commit_rate(bootstrap: str, topic: str, committers: int, seconds: float) -> float:
    """Each committer is a consumer of its own group committing synchronously in a loop."""
    counts = [0] * committers
    stop = time.time() + seconds

    def run(i):
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-commit-{committers}-{i}",
                      "enable.auto.commit": False, "broker.address.family": "v4"})
        n = 0
        while time.time() < stop:
            c.commit(offsets=[TopicPartition(topic, i % 4, n)], asynchronous=False)
            n += 1
        counts[i] = n
        c.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(committers)]
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / (time.time() - t0)


def rebalance_time(bootstrap: str, topic: str, members: int) -> float:
    """Seconds from the last member's subscribe until all members hold a disjoint share."""
    group = f"bench-rebalance-{time.time_ns()}"
    cs = [Consumer({"bootstrap.servers": bootstrap, "group.id": group, "session.timeout.ms": 10000,
                    "heartbeat.interval.ms": 300, "broker.address.family": "v4"}) for _ in range(members)]
    for c in cs[:-1]:
        c.subscribe([topic])
    # Let the first members settle, then time the join of the last one.
    settle = time.time() + 10
    while time.time() < settle:
        for c in cs[:-1]:
            c.poll(0.01)
        if sum(len(c.assignment()) for c in cs[:-1]) == members and all(c.assignment() for c in cs[:-1]):
            break
    t0 = time.time()
    cs[-1].subscribe([topic])
    while time.time() - t0 < 60:
        for c in cs:
            c.poll(0.005)
        parts = [tp.partition for c in cs for tp in c.assignment()]
        if all(c.assignment() for c in cs) and sorted(parts) == list(range(members)):
            break
    took = time.time() - t0
    for c in cs:
        c.close()
    return took


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--json", default=str(ROOT / "target/bench/groups.json"))
    args = ap.parse_args()
    proc = None
    bootstrap = args.bootstrap
    if not bootstrap:
        proc, bootstrap = start_broker()
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        topic = f"bench-groups-{os.getpid()}"
        admin.create_topics([NewTopic(topic, 10, 1)])[topic].result(15)
        out = {"commits_per_s": {}, "rebalance_s": {}}
        for n in (1, 10, 100):
            r = commit_rate(bootstrap, topic, n, args.seconds)
            out["commits_per_s"][n] = round(r)
            print(f"commit throughput, {n:3d} concurrent committers: {r:8.0f} commits/s", flush=True)
        times = [rebalance_time(bootstrap, topic, 10) for _ in range(3)]
        out["rebalance_s"]["10_members"] = times
        print("rebalance of 10 members when the 10th joins: "
              + ", ".join(f"{t * 1000:.0f} ms" for t in times), flush=True)
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(out, indent=2))
    finally:
        if proc:
            proc.terminate()
            proc.wait(20)


if __name__ == "__main__":
    main()
