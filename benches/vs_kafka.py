#!/usr/bin/env python3
"""weir against Apache Kafka itself, same machine, same clients, same run (issue 37, first cut).

Resolves Apache Kafka's broker from Maven Central (`org.apache.kafka:kafka_2.13` and
`kafka-tools`, --kafka-version, default 4.4.0) into target/bench/kafka-<version>/lib with
`mvn dependency:copy-dependencies` (once; cached), formats a KRaft log directory and starts one
Kafka node in combined mode (process.roles=broker,controller) on 127.0.0.1 with the heap and
JVM options of Kafka's own kafka-server-start.sh (-Xms1g -Xmx1g, G1, MaxGCPauseMillis=20),
and one `weir serve` (target/release/weir; WEIR_BIN overrides) with its defaults. Both run
throughout; the data of both is under --data (default target/bench/vs-kafka, the same
filesystem).

Every round, for each partition count of --partitions (default 16,100) and each load (full
speed with --producers producers for --duration s, then each fixed rate of --rates records/s
with one producer for --rate-duration s), the systems run one after another on fresh topics, in
an order that alternates from round to round:

  weir          acks=all: acknowledged once fdatasync'ed on weir (its default durability)
  kafka         acks=all, Kafka's defaults: acknowledged once in the page cache, never fsync'ed
  kafka-flush1  acks=all on a topic with flush.messages=1: Kafka fsyncs every message set
                (the durability weir gives)

all through the same load generator: `weir bench produce --client rdkafka` (librdkafka),
1 KiB records (--record-size). Figures per run: MB/s and records/s acknowledged, send→ack
latency p50/p99/p999/max, broker CPU seconds per GB (utime+stime of the broker process from
/proc, as `weir bench --broker-pid` reports it), broker RSS after the run, and device bytes
written per byte acknowledged (/proc/diskstats of the --data device).

Output: one line per run, then medians [min-max] over the rounds and the ratios weir/kafka and
weir/kafka-flush1 paired per round; everything in --out/vs_kafka.json.

    cargo build --release --features rdkafka && python3 benches/vs_kafka.py [--rounds 3]
        [--partitions 16,100] [--rates 2000,20000,200000] [--duration 10] [--rate-duration 8]
        [--producers 2] [--systems weir,kafka,kafka-flush1] [--kafka-version 4.4.0] [--smoke]

--smoke: one round, 16 partitions, 3 s runs, one rate (about a minute after Kafka is resolved).

Not yet here (issue 37 asks for them): consume throughput and a catch-up read larger than the
page cache, end-to-end latency, Kafka's own Java tools as a second client, three-node RF 3,
acks=1 rows, latency CDF plots.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent))
import replication as rep  # noqa: E402 - the weir broker, /proc and /proc/diskstats helpers

ROOT = rep.ROOT
SYSTEMS = ("weir", "kafka", "kafka-flush1")
KAFKA_JVM = ["-Xms1g", "-Xmx1g", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
             "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
             "-Djava.awt.headless=true"]


def log(msg: str) -> None:
    print(msg, flush=True)


def resolve_kafka(version: str) -> Path:
    """target/bench/kafka-<version>/lib with the broker's and the tools' jars."""
    home = ROOT / "target" / "bench" / f"kafka-{version}"
    lib = home / "lib"
    if lib.is_dir() and any(lib.glob(f"kafka_2.13-{version}.jar")):
        return lib
    home.mkdir(parents=True, exist_ok=True)
    deps = "".join(
        f"<dependency><groupId>{g}</groupId><artifactId>{a}</artifactId><version>{v}</version></dependency>"
        for g, a, v in [("org.apache.kafka", "kafka_2.13", version), ("org.apache.kafka", "kafka-tools", version),
                        ("org.slf4j", "slf4j-reload4j", "2.0.17")])
    (home / "pom.xml").write_text(
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        "<groupId>weir.bench</groupId><artifactId>kafka-broker</artifactId><version>1</version>"
        f"<packaging>pom</packaging><dependencies>{deps}</dependencies></project>\n")
    log(f"resolving Apache Kafka {version} from Maven Central into {lib} ...")
    subprocess.run(["mvn", "-q", "-B", "dependency:copy-dependencies", f"-DoutputDirectory={lib}"],
                   cwd=home, check=True)
    return lib


class Kafka:
    """One Apache Kafka node in KRaft combined mode on 127.0.0.1."""

    def __init__(self, lib: Path, data: Path):
        self.name = "kafka"
        self.dir = data / "kafka"
        self.dir.mkdir(parents=True, exist_ok=True)
        port, cport = rep.free_ports(2)
        self.bootstrap = f"127.0.0.1:{port}"
        props = self.dir / "server.properties"
        props.write_text("\n".join([
            "process.roles=broker,controller", "node.id=1",
            f"controller.quorum.voters=1@127.0.0.1:{cport}",
            f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}",
            "controller.listener.names=CONTROLLER",
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            f"log.dirs={self.dir / 'data'}",
            # A single node: the internal topics cannot have three replicas.
            "offsets.topic.replication.factor=1", "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1", "group.initial.rebalance.delay.ms=0",
        ]) + "\n")
        cp = ["java", "-cp", f"{lib}/*"]
        cluster_id = subprocess.run(cp + ["kafka.tools.StorageTool", "random-uuid"], capture_output=True,
                                    text=True, check=True).stdout.split()[-1]
        subprocess.run(cp + ["kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(props)],
                       capture_output=True, check=True)
        self.out = self.dir / "kafka.out"
        self.proc = subprocess.Popen(["java", *KAFKA_JVM, "-cp", f"{lib}/*", "kafka.Kafka", str(props)],
                                     stdout=open(self.out, "wb"), stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                sys.exit(f"kafka did not start:\n{self.out.read_text(errors='replace')[-3000:]}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    pass
                md = AdminClient({"bootstrap.servers": self.bootstrap}).list_topics(timeout=5)
                if md.brokers:
                    return
            except Exception:  # noqa: BLE001 - not up yet
                pass
            time.sleep(0.5)
        self.stop()
        sys.exit(f"kafka did not answer within 60 s:\n{self.out.read_text(errors='replace')[-3000:]}")

    def stop(self) -> None:
        rep.Broker.stop(self)

    def check_alive(self) -> None:
        rep.Broker.check_alive(self)


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def make_topic(bootstrap: str, topic: str, partitions: int, config: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1, config=config)],
                        request_timeout=30)[topic].result(60)
    rep.wait_for(f"{topic} has leaders", lambda: (
        (t := admin.list_topics(topic, timeout=10).topics.get(topic)) is not None
        and len(t.partitions) == partitions and all(p.leader >= 0 for p in t.partitions.values())) or None)


def drop_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic], request_timeout=30)[topic].result(60)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--partitions", default="16,100")
    ap.add_argument("--rates", default="2000,20000,200000", help="fixed rates, records/s (empty: none)")
    ap.add_argument("--duration", type=int, default=10, help="seconds of each full-speed run")
    ap.add_argument("--rate-duration", type=int, default=8)
    ap.add_argument("--producers", type=int, default=2)
    ap.add_argument("--record-size", type=int, default=1024)
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--kafka-version", default="4.4.0")
    ap.add_argument("--data", type=Path, default=ROOT / "target" / "bench" / "vs-kafka")
    ap.add_argument("--out", type=Path, default=ROOT / "target" / "bench" / "vs-kafka-out")
    ap.add_argument("--smoke", action="store_true")
    a = ap.parse_args()
    if a.smoke:
        a.rounds, a.partitions, a.duration, a.rate_duration, a.rates = 1, "16", 3, 3, "20000"
    if not rep.WEIR.is_file():
        sys.exit(f"{rep.WEIR} does not exist: cargo build --release --features rdkafka")
    systems = [s for s in SYSTEMS if s in a.systems.split(",")]
    parts = [int(x) for x in a.partitions.split(",")]
    rates = [int(x) for x in a.rates.split(",") if x.strip()]
    cmd = "python3 benches/vs_kafka.py " + " ".join(sys.argv[1:])
    lib = resolve_kafka(a.kafka_version)
    data = a.data.resolve()
    shutil.rmtree(data, ignore_errors=True)
    data.mkdir(parents=True)
    a.out.mkdir(parents=True, exist_ok=True)
    dev = rep.device_of(data)
    weir = rep.Broker("weir", data, os.cpu_count() or 1, [])
    kafka = Kafka(lib, data)
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()[0]
    log(f"weir {weir.bootstrap} (pid {weir.proc.pid}, --cores {os.cpu_count()}); Apache Kafka "
        f"{a.kafka_version} {kafka.bootstrap} (pid {kafka.proc.pid}, {java}, {' '.join(KAFKA_JVM[:2])})")
    runs: list[dict] = []
    try:
        for rnd in range(1, a.rounds + 1):
            order = systems if rnd % 2 else list(reversed(systems))
            for p in parts:
                for load in [None, *rates]:
                    for system in order:
                        b = weir if system == "weir" else kafka
                        topic = f"{system}-p{p}-{load or 'max'}-r{rnd}"
                        make_topic(b.bootstrap, topic, p, {"flush.messages": "1"} if system == "kafka-flush1" else {})
                        args = ["produce", "--bootstrap", b.bootstrap, "--broker-pid", str(b.proc.pid),
                                "--topic", topic, "--partitions", str(p), "--client", "rdkafka", "--acks", "-1",
                                "--record-size", str(a.record_size), "--raw-secs", "0",
                                "--work-dir", str(data / "bench-work")]
                        args += (["--producers", str(a.producers), "--duration", str(a.duration)] if load is None
                                 else ["--producers", "1", "--duration", str(a.rate_duration), "--rate", str(load)])
                        d0 = rep.disk_counters(dev)
                        report, _ = rep.run_bench(topic, a.out, args)
                        d1 = rep.disk_counters(dev)
                        lat = report["latency"][0]["percentiles"]
                        acked = rep.figure(report, "records acknowledged", "records")
                        r = {"round": rnd, "system": system, "partitions": p, "load": load or "max",
                             "mb_s": rep.figure(report, "weir produce", "MB/s"),
                             "rec_s": rep.figure(report, "weir produce", "records/s"),
                             "errors": rep.figure(report, "produce errors", "records"),
                             "cpu_s_per_gb": rep.figure(report, "broker CPU per GB produced", "s/GB"),
                             "p50_ms": lat["p50"] / 1000, "p99_ms": lat["p99"] / 1000,
                             "p999_ms": lat["p999"] / 1000, "max_ms": lat["max"] / 1000,
                             "rss_mib": rss_mib(b.proc.pid),
                             "disk_per_acked": (d1[0] - d0[0]) / max(1.0, acked * a.record_size)}
                        runs.append(r)
                        log(f"  r{rnd} {system:<12} p{p:<4} {str(r['load']):<7} {r['mb_s']:7.1f} MB/s "
                            f"{r['rec_s']:9.0f} rec/s  ack p50 {r['p50_ms']:8.2f} p99 {r['p99_ms']:8.2f} "
                            f"p999 {r['p999_ms']:8.2f} max {r['max_ms']:8.2f} ms | CPU {r['cpu_s_per_gb']:.2f} s/GB | "
                            f"RSS {r['rss_mib']:.0f} MiB | disk {r['disk_per_acked']:.2f} x acked"
                            + (f" | {r['errors']:.0f} ERRORS" if r["errors"] else ""))
                        drop_topic(b.bootstrap, topic)
                        weir.check_alive()
                        kafka.check_alive()
    finally:
        weir.stop()
        kafka.stop()
    summary(runs, systems, parts, rates, a.rounds, cmd)
    (a.out / "vs_kafka.json").write_text(json.dumps({"command": cmd, "kafka": a.kafka_version,
                                                     "jvm": KAFKA_JVM, "runs": runs}, indent=1))
    shutil.rmtree(data, ignore_errors=True)
    return 1 if any(r["errors"] for r in runs) else 0


def summary(runs, systems, parts, rates, rounds, cmd) -> None:
    log(f"\n== weir vs Apache Kafka: produce acks=all through librdkafka, medians [min-max] over {rounds} "
        f"round(s) ==\n{cmd}")
    log(f"{'system':<13} {'parts':<6} {'load':<8} {'MB/s':<22} {'ack p50 ms':<22} {'p99 ms':<24} "
        f"{'CPU s/GB':<20} {'RSS MiB':<10} disk/acked")
    for p in parts:
        for load in ["max", *rates]:
            for s in systems:
                rs = [r for r in runs if r["system"] == s and r["partitions"] == p and r["load"] == load]
                if rs:
                    log(f"{s:<13} {p:<6} {str(load):<8} {rep.mm([r['mb_s'] for r in rs]):<22} "
                        f"{rep.mm([r['p50_ms'] for r in rs], '{:.2f}'):<22} "
                        f"{rep.mm([r['p99_ms'] for r in rs], '{:.2f}'):<24} "
                        f"{rep.mm([r['cpu_s_per_gb'] for r in rs], '{:.2f}'):<20} "
                        f"{statistics.median([r['rss_mib'] for r in rs]):<10.0f} "
                        f"{statistics.median([r['disk_per_acked'] for r in rs]):.2f}")
    for other in [s for s in systems if s != "weir"]:
        for p in parts:
            def paired(key, load):
                out = []
                for rnd in range(1, rounds + 1):
                    w = [r[key] for r in runs if (r["system"], r["partitions"], r["load"], r["round"])
                         == ("weir", p, load, rnd)]
                    k = [r[key] for r in runs if (r["system"], r["partitions"], r["load"], r["round"])
                         == (other, p, load, rnd)]
                    if w and k and k[0]:
                        out.append(w[0] / k[0])
                return out
            log(f"weir / {other}, {p} partitions, paired per round: full-speed MB/s "
                f"{rep.mm(paired('mb_s', 'max'), '{:.2f}')} x, CPU s/GB {rep.mm(paired('cpu_s_per_gb', 'max'), '{:.2f}')} x"
                + "".join(f"; at {x}/s p99 {rep.mm(paired('p99_ms', x), '{:.2f}')} x" for x in rates))


if __name__ == "__main__":
    sys.exit(main())
