#!/usr/bin/env python3
"""Rebalance benchmark (issue 39): a member joins a group of N-1 that is consuming; how long
until the group is stable again, and how long the members already there stop consuming.
Classic eager (range), classic cooperative-sticky and KIP-848 (group.protocol=consumer, the
broker's uniform assignor), same broker, same run, for N = 10 and N = 100.

Records are produced at a steady rate to every partition (2 per member) while the group
consumes. For each mode: the N-1 members join and settle (every partition assigned, every
member holding its share); at t0 the N-th member subscribes. Figures:
- stable after: t0 until every partition is assigned to exactly one member and the new member
  holds partitions (each member's view, from its rebalance callbacks);
- pause of the others: for each member that was there before, the longest time without a
  record between t0 and 2 s after stable (records keep coming to every partition at
  `--rate`, so an idle stretch is a stop, not an empty topic); median and max over them;
- longest gap before the join: the same measure over the 3 s before t0, with no rebalance:
  the floor the pause is to be read against.

Every client runs with its defaults but these (stated in the output): classic
session.timeout.ms 45000 and heartbeat.interval.ms 3000 (librdkafka's defaults), KIP-848's
heartbeat interval is the broker's (group.consumer.heartbeat.interval.ms, default 5000).

Systems (--systems, default weir,kafka), each measured in every mode, one after another in the
same run: its own weir broker (target/release/weir, 2 cores, its defaults: the consumer
protocol is on) in a temp dir under target/, and Apache Kafka (--kafka-version, default 4.4.0,
resolved from Maven Central and started in KRaft combined mode as benches/vs_kafka.py does,
with its defaults: the same 5 s KIP-848 heartbeat and 45 s sessions). --bootstrap HOST:PORT
measures one broker already running instead (any Kafka broker with KIP-848).

    cargo build --release && python3 benches/rebalance.py [--members 10,100] [--rate 2000]
        [--systems weir,kafka] [--kafka-version 4.4.0]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

MODES = {
    "classic eager (range)": {"partition.assignment.strategy": "range"},
    "classic cooperative-sticky": {"partition.assignment.strategy": "cooperative-sticky"},
    "KIP-848 (uniform)": {"group.protocol": "consumer"},
}


def start_broker(settings: list[str]) -> tuple[subprocess.Popen, str, Path]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-rebalance-", dir=ROOT / "target"))
    log = open(tmp / "weir.log", "w")
    cmd = [str(ROOT / "target/release/weir"), "serve", "--data-dir", str(tmp / "data"),
           "--listen", "127.0.0.1:0", "--cores", "2", "--set", "metrics.listen=127.0.0.1:0"]
    for s in settings:
        cmd += ["--set", s]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 30
    while time.time() < deadline:
        m = re.search(r"listening on 127\.0\.0\.1:(\d+)", (tmp / "weir.log").read_text())
        if m:
            return proc, f"127.0.0.1:{m.group(1)}", tmp
        time.sleep(0.05)
    proc.kill()
    sys.exit("broker did not start")


class Member:
    """One group member polling in its own thread; records when it consumed and what it owns."""

    def __init__(self, bootstrap: str, group: str, topic: str, conf: dict, name: str):
        self.owned: set[int] = set()
        self.times: list[float] = []
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
                           "auto.offset.reset": "latest", "enable.auto.commit": True,
                           "broker.address.family": "v4", **conf})
        cooperative = conf.get("partition.assignment.strategy") == "cooperative-sticky" or "group.protocol" in conf

        def assigned(c, ps):
            with self.lock:
                self.owned |= {p.partition for p in ps}
            if cooperative and "group.protocol" not in conf:
                c.incremental_assign(ps)

        def revoked(c, ps):
            with self.lock:
                self.owned -= {p.partition for p in ps}
            if cooperative and "group.protocol" not in conf:
                c.incremental_unassign(ps)

        self.c.subscribe([topic], on_assign=assigned, on_revoke=revoked, on_lost=revoked)
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.stop.is_set():
            for m in self.c.consume(num_messages=500, timeout=0.05):
                if m.error() is None:
                    self.times.append(time.monotonic())

    def partitions(self) -> set[int]:
        with self.lock:
            return set(self.owned)

    def close(self):
        self.stop.set()
        self.t.join(10)
        self.c.close()


def stable(members: list[Member], partitions: int) -> bool:
    seen: list[int] = []
    for m in members:
        ps = m.partitions()
        if not ps:
            return False
        seen += ps
    return len(seen) == partitions and set(seen) == set(range(partitions))


def longest_gap(times: list[float], start: float, end: float) -> float:
    ts = [t for t in times if start <= t <= end]
    points = [start, *ts, end]
    return max(b - a for a, b in zip(points, points[1:]))


def run_mode(bootstrap: str, name: str, conf: dict, n: int, rate: int) -> dict:
    row = measure(bootstrap, name, conf, n, rate)
    print(json.dumps(row), flush=True)
    return row


def measure(bootstrap: str, name: str, conf: dict, n: int, rate: int) -> dict:
    partitions = 2 * n
    topic = f"bench-rebalance-{n}-{int(time.time() * 1000)}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    time.sleep(0.5)
    stop = threading.Event()

    def produce():
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "broker.address.family": "v4"})
        i = 0
        step = 0.01
        per_step = max(1, int(rate * step))
        nxt = time.monotonic()
        while not stop.is_set():
            for _ in range(per_step):
                p.produce(topic, value=b"x" * 100, partition=i % partitions)
                i += 1
            p.poll(0)
            nxt += step
            time.sleep(max(0.0, nxt - time.monotonic()))
        p.flush(10)

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    group = f"{topic}-g"
    members = [Member(bootstrap, group, topic, conf, f"m{i}") for i in range(n - 1)]
    try:
        deadline = time.monotonic() + 300
        while not stable(members, partitions):
            if time.monotonic() > deadline:
                return {"mode": name, "members": n, "error": "the first N-1 members never settled"}
            time.sleep(0.1)
        time.sleep(3)  # consuming steadily
        t0 = time.monotonic()
        members.append(Member(bootstrap, group, topic, conf, f"m{n - 1}"))
        while not stable(members, partitions):
            if time.monotonic() > t0 + 300:
                return {"mode": name, "members": n, "error": "no stable assignment within 300 s"}
            time.sleep(0.02)
        t_stable = time.monotonic() - t0
        time.sleep(2)
        end = t0 + t_stable + 2
        pauses = [longest_gap(m.times, t0, end) for m in members[:-1]]
        # The same measure over the 3 s of steady consumption before the join: what the
        # broker and clients give without a rebalance.
        steady = [longest_gap(m.times, t0 - 3, t0) for m in members[:-1]]
        return {"mode": name, "members": n, "partitions": partitions, "stable_after_s": round(t_stable, 2),
                "pause_median_s": round(statistics.median(pauses), 2), "pause_max_s": round(max(pauses), 2),
                "steady_gap_median_s": round(statistics.median(steady), 2),
                "steady_gap_max_s": round(max(steady), 2)}
    finally:
        stop.set()
        for m in members:
            m.close()
        producer.join(10)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap")
    ap.add_argument("--members", default="10,100")
    ap.add_argument("--rate", type=int, default=2000, help="records/s produced over all partitions")
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated subset of the modes")
    ap.add_argument("--systems", default="weir,kafka", help="weir, kafka or both (ignored with --bootstrap)")
    ap.add_argument("--kafka-version", default="4.4.0")
    args = ap.parse_args()
    systems = ["given"] if args.bootstrap else [x.strip() for x in args.systems.split(",")]
    rows = []
    for system in systems:
        proc, kafka = None, None
        if system == "given":
            bootstrap = args.bootstrap
        elif system == "weir":
            proc, bootstrap, _ = start_broker([])
        elif system == "kafka":
            import vs_kafka  # Apache Kafka from Maven Central, as the Kafka comparison starts it
            data = Path(tempfile.mkdtemp(prefix="bench-rebalance-kafka-", dir=ROOT / "target"))
            kafka = vs_kafka.start_kafka(vs_kafka.resolve_kafka(args.kafka_version), data, 1)
            bootstrap = kafka.bootstrap
        else:
            sys.exit(f"unknown system {system}")
        try:
            for n in [int(x) for x in args.members.split(",")]:
                for name in [m.strip() for m in args.modes.split(",")]:
                    row = run_mode(bootstrap, name, MODES[name], n, args.rate)
                    rows.append({"system": system, **row})
        finally:
            if proc:
                proc.terminate()
                proc.wait(30)
            if kafka:
                kafka.stop()
    print("\n| members | mode | system | stable after (s) | pause of the others, median / max (s) "
          "| longest gap before the join, median / max (s) |")
    print("|---|---|---|---|---|---|")
    for r in sorted(rows, key=lambda r: (r["members"], list(MODES).index(r["mode"]), r["system"])):
        if "error" in r:
            print(f"| {r['members']} | {r['mode']} | {r['system']} | {r['error']} | | |")
        else:
            print(f"| {r['members']} | {r['mode']} | {r['system']} | {r['stable_after_s']} "
                  f"| {r['pause_median_s']} / {r['pause_max_s']} "
                  f"| {r['steady_gap_median_s']} / {r['steady_gap_max_s']} |")


if __name__ == "__main__":
    main()
