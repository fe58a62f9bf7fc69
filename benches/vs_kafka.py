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

Every round, for each partition count of --partitions (default 16,100), the workloads of
--workloads run on fresh topics, each system one after another, in an order that alternates
from round to round. The systems:

  weir          acks=all: acknowledged once fdatasync'ed on weir (its default durability)
  kafka         acks=all, Kafka's defaults: acknowledged once in the page cache, never fsync'ed
  kafka-flush1  acks=all on a topic with flush.messages=1: Kafka fsyncs every message set
                (the durability weir gives)
  weir-acks1, kafka-acks1   acks=1 (the acks1 workload)

The workloads (see WORKLOADS below): produce (librdkafka, `weir bench produce --client
rdkafka`: full speed with --producers producers for --duration s, then each fixed rate of
--rates records/s with one producer for --rate-duration s), acks1 (full speed, acks=1), java
(Kafka's ProducerPerformance, the Java producer with its defaults, acks=all), e2e (librdkafka
producer and consumer at each fixed rate, `weir bench consume-tail`; then Kafka's
EndToEndLatency tool, one record at a time) and catchup (--dataset written, the page cache
dropped, then read from offset 0 by librdkafka; dropped again and read by Kafka's
ConsumerPerformance). 1 KiB records (--record-size).

Figures per run, where they apply: MB/s and records/s (acknowledged, or read), latency
p50/p99/p999/max (send→ack, or end to end), broker CPU seconds per GB (utime+stime of the
broker process from /proc), broker RSS after the run, and device bytes written per byte
acknowledged (/proc/diskstats of the --data device).

Output: one line per run, then per workload medians [min-max] over the rounds and the ratios
weir/kafka and weir/kafka-flush1 paired per round; a latency CDF (SVG, every round's curve per
system) per workload and fixed rate, cdf-*.svg; everything in --out/vs_kafka.json.

    cargo build --release --features rdkafka && python3 benches/vs_kafka.py [--rounds 3]
        [--partitions 16,100] [--rates 2000,20000,200000] [--duration 10] [--rate-duration 8]
        [--producers 2] [--systems weir,kafka,kafka-flush1] [--workloads produce,acks1,java,e2e,catchup]
        [--dataset 4GiB] [--kafka-version 4.4.0] [--smoke]

--smoke: one round, 16 partitions, 3 s runs, one rate, a 256 MiB dataset (a few minutes).
The catch-up read drops the page cache, so it needs root.

--brokers 3: a cluster of three weir brokers (--node-id/--peers, PLAINTEXT between them) and
one of three Kafka nodes (each broker and controller, three voters), topics of replication
factor 3 (--rf); CPU and RSS are the sums over the three processes of each system.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
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
    """One Apache Kafka node in KRaft combined mode (broker and controller) on 127.0.0.1;
    node `node_id` of the voters `ports` = [(broker port, controller port), ...]."""

    def __init__(self, lib: Path, data: Path, cluster_id: str, node_id: int = 1,
                 ports: list[tuple[int, int]] | None = None):
        ports = ports or [tuple(rep.free_ports(2))]
        self.name = f"kafka{node_id}"
        self.dir = data / self.name
        self.dir.mkdir(parents=True, exist_ok=True)
        port, cport = ports[node_id - 1]
        self.port, self.bootstrap = port, f"127.0.0.1:{port}"
        rf = min(3, len(ports))
        props = self.dir / "server.properties"
        props.write_text("\n".join([
            "process.roles=broker,controller", f"node.id={node_id}",
            "controller.quorum.voters=" + ",".join(f"{i + 1}@127.0.0.1:{c}" for i, (_, c) in enumerate(ports)),
            f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}",
            "controller.listener.names=CONTROLLER",
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            f"log.dirs={self.dir / 'data'}",
            # A single node: the internal topics cannot have three replicas.
            f"offsets.topic.replication.factor={rf}", f"transaction.state.log.replication.factor={rf}",
            f"transaction.state.log.min.isr={min(2, rf)}", "group.initial.rebalance.delay.ms=0",
        ]) + "\n")
        cp = ["java", "-cp", f"{lib}/*"]
        subprocess.run(cp + ["kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(props)],
                       capture_output=True, check=True)
        self.out = self.dir / "kafka.out"
        self.proc = subprocess.Popen(["java", *KAFKA_JVM, "-cp", f"{lib}/*", "kafka.Kafka", str(props)],
                                     stdout=open(self.out, "wb"), stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)

    def wait_up(self, brokers: int) -> None:
        deadline = time.time() + 90
        while time.time() < deadline:
            if self.proc.poll() is not None:
                sys.exit(f"{self.name} did not start:\n{self.out.read_text(errors='replace')[-3000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    pass
                md = AdminClient({"bootstrap.servers": self.bootstrap}).list_topics(timeout=5)
                if len(md.brokers) >= brokers:
                    return
            except Exception:  # noqa: BLE001 - not up yet
                pass
            time.sleep(0.5)
        self.stop()
        sys.exit(f"{self.name} did not answer within 90 s:\n{self.out.read_text(errors='replace')[-3000:]}")

    def stop(self) -> None:
        rep.Broker.stop(self)

    def check_alive(self) -> None:
        rep.Broker.check_alive(self)


class Nodes:
    """One system's brokers (one, or a cluster of three): bootstrap, CPU and RSS of them all."""

    def __init__(self, name: str, nodes: list):
        self.name, self.nodes = name, nodes
        self.bootstrap = ",".join(n.bootstrap for n in nodes)
        # `weir bench --bootstrap` takes one address; librdkafka learns the rest from metadata.
        self.first = nodes[0].bootstrap
        self.pids = [n.proc.pid for n in nodes]

    def cpu(self) -> float:
        return sum(rep.proc_cpu(p) for p in self.pids)

    def rss(self) -> float:
        return sum(rss_mib(p) for p in self.pids)

    def check_alive(self) -> None:
        for n in self.nodes:
            n.check_alive()

    def stop(self) -> None:
        for n in self.nodes:
            n.stop()


def start_weir(data: Path, n: int) -> Nodes:
    if n == 1:
        return Nodes("weir", [rep.Broker("weir", data, os.cpu_count() or 1, [])])
    voters = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(rep.free_ports(n)))
    nodes = Nodes("weir", [rep.Broker(f"weir{i + 1}", data, os.cpu_count() or 1,
                                      ["--node-id", str(i + 1), "--peers", voters,
                                       "--set", "security.inter.broker.protocol=PLAINTEXT"]) for i in range(n)])
    rep.wait_for("every weir broker registered", lambda: len(
        AdminClient({"bootstrap.servers": nodes.bootstrap}).list_topics(timeout=10).brokers) >= n)
    return nodes


def start_kafka(lib: Path, data: Path, n: int) -> Nodes:
    cluster_id = subprocess.run(["java", "-cp", f"{lib}/*", "kafka.tools.StorageTool", "random-uuid"],
                                capture_output=True, text=True, check=True).stdout.split()[-1]
    flat = rep.free_ports(2 * n)
    ports = [(flat[2 * i], flat[2 * i + 1]) for i in range(n)]
    nodes = [Kafka(lib, data, cluster_id, i + 1, ports) for i in range(n)]
    for k in nodes:
        k.wait_up(n)
    return Nodes("kafka", nodes)


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def make_topic(bootstrap: str, topic: str, partitions: int, config: dict[str, str], rf: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=rf, config=config)],
                        request_timeout=30)[topic].result(60)
    rep.wait_for(f"{topic} has leaders", lambda: (
        (t := admin.list_topics(topic, timeout=10).topics.get(topic)) is not None
        and len(t.partitions) == partitions
        and all(p.leader >= 0 and len(p.isrs) == rf for p in t.partitions.values())) or None)


def drop_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic], request_timeout=30)[topic].result(60)


# Workloads, each run for every system that applies to it (--workloads picks some):
#   produce   librdkafka producers (`weir bench produce --client rdkafka`), acks=all: full speed
#             and each fixed rate; systems weir, kafka, kafka-flush1
#   acks1     the same at full speed with acks=1: weir-acks1 against kafka-acks1
#   java      Kafka's ProducerPerformance (kafka-tools, the Java client with its defaults),
#             acks=all, full speed and each fixed rate; weir, kafka, kafka-flush1
#   e2e       end-to-end latency at each fixed rate: librdkafka producer and consumer
#             (`weir bench consume-tail --client rdkafka`, acks=all), then Kafka's
#             EndToEndLatency tool (one record at a time, --e2e-records of them)
#   catchup   a catch-up read of --dataset bytes written beforehand, with the page cache
#             dropped before the read (sync; echo 3 > /proc/sys/vm/drop_caches: needs root):
#             librdkafka (`weir bench consume-disk --drop-caches`), then Kafka's
#             ConsumerPerformance over the same data after a second drop; weir, kafka
WORKLOADS = ("produce", "acks1", "java", "e2e", "catchup")


class Bench:
    def __init__(self, a, lib: Path, data: Path, weir: rep.Broker, kafka: Kafka):
        self.a, self.lib, self.data, self.weir, self.kafka = a, lib, data, weir, kafka
        self.dev = rep.device_of(data)
        self.runs: list[dict] = []

    def broker(self, system: str):
        return self.weir if system.startswith("weir") else self.kafka

    def topic(self, system: str, workload: str, p: int, load, rnd: int) -> str:
        b = self.broker(system)
        t = f"{system}-{workload}-p{p}-{load or 'max'}-r{rnd}"
        make_topic(b.bootstrap, t, p, {"flush.messages": "1"} if system == "kafka-flush1" else {}, self.a.rf)
        return t

    def record(self, r: dict) -> None:
        self.runs.append(r)
        # Kept after every run, so that a run cut short is not lost.
        (self.a.out / "vs_kafka.partial.json").write_text(json.dumps({"runs": self.runs}))
        keys = [("mb_s", "{:7.1f} MB/s"), ("rec_s", "{:9.0f} rec/s"), ("p50_ms", "p50 {:8.2f}"),
                ("p99_ms", "p99 {:8.2f}"), ("p999_ms", "p999 {:8.2f}"), ("max_ms", "max {:8.2f} ms"),
                ("cpu_s_per_gb", "| CPU {:.2f} s/GB"), ("rss_mib", "| RSS {:.0f} MiB"),
                ("disk_per_acked", "| disk {:.2f} x acked"), ("ack_p99_ms", "| ack p99 {:.2f}"), ("ack_max_ms", "max {:.1f} ms"),
                ("first_record_ms", "| first record {:.0f} ms")]
        text = " ".join(f.format(r[k]) for k, f in keys if r.get(k) is not None)
        log(f"  r{r['round']} {r['workload']:<16} {r['system']:<12} p{r['partitions']:<4} {str(r['load']):<7} {text}"
            + (f" | {r['errors']:.0f} ERRORS" if r.get("errors") else ""))
        self.weir.check_alive()
        self.kafka.check_alive()

    def base(self, rnd, workload, system, p, load) -> dict:
        return {"round": rnd, "workload": workload, "system": system, "partitions": p, "load": load or "max"}

    def rd_produce(self, rnd: int, workload: str, system: str, p: int, load, acks: str) -> None:
        a, b = self.a, self.broker(system)
        topic = self.topic(system, workload, p, load, rnd)
        args = ["produce", "--bootstrap", b.first, "--topic", topic,
                "--partitions", str(p), "--client", "rdkafka", "--acks", acks, "--record-size", str(a.record_size),
                "--raw-secs", "0", "--work-dir", str(self.data / "bench-work")]
        args += (["--producers", str(a.producers), "--duration", str(a.duration)] if load is None
                 else ["--producers", "1", "--duration", str(a.rate_duration), "--rate", str(load)])
        d0, c0 = rep.disk_counters(self.dev), b.cpu()
        report, _ = rep.run_bench(topic, a.out, args)
        c1, d1 = b.cpu(), rep.disk_counters(self.dev)
        lat = report["latency"][0]
        acked = rep.figure(report, "records acknowledged", "records")
        r = self.base(rnd, workload, system, p, load)
        r.update({"mb_s": rep.figure(report, "weir produce", "MB/s"),
                  "rec_s": rep.figure(report, "weir produce", "records/s"),
                  "errors": rep.figure(report, "produce errors", "records"),
                  "cpu_s_per_gb": (c1 - c0) / max(1e-9, acked * a.record_size / 1e9),
                  **latencies(lat), "cdf": lat.get("distribution"),
                  "rss_mib": b.rss(),
                  "disk_per_acked": (d1[0] - d0[0]) / max(1.0, acked * a.record_size)})
        self.record(r)
        drop_topic(b.bootstrap, topic)

    def java_produce(self, rnd: int, system: str, p: int, load) -> None:
        """ProducerPerformance: Kafka's own load generator, the Java producer's defaults, acks=all."""
        a, b = self.a, self.broker(system)
        topic = self.topic(system, "java-produce", p, load, rnd)
        n = a.java_records if load is None else load * a.rate_duration
        cmd = ["java", "-Xmx1g", "-cp", f"{self.lib}/*", "org.apache.kafka.tools.ProducerPerformance",
               "--topic", topic, "--num-records", str(n), "--record-size", str(a.record_size),
               "--throughput", str(load or -1), "--bootstrap-server", b.bootstrap, "--producer-props", "acks=all"]
        d0, c0 = rep.disk_counters(self.dev), b.cpu()
        out = run_tool(cmd, a.out / f"{topic}.txt")
        c1, d1 = b.cpu(), rep.disk_counters(self.dev)
        # "N records sent, R records/sec (M MB/sec), A ms avg latency, X ms max latency,
        #  a ms 50th, b ms 95th, c ms 99th, d ms 99.9th."
        m = re.search(r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
                      r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99.9th", out)
        if not m:
            raise RuntimeError(f"ProducerPerformance printed no summary:\n{out[-3000:]}")
        sent = int(m.group(1))
        r = self.base(rnd, "java-produce", system, p, load)
        r.update({"rec_s": float(m.group(2)), "mb_s": float(m.group(3)) * 1.048576,
                  "p50_ms": float(m.group(6)), "p99_ms": float(m.group(8)), "p999_ms": float(m.group(9)),
                  "max_ms": float(m.group(5)), "errors": float(n - sent),
                  "cpu_s_per_gb": (c1 - c0) / max(1e-9, sent * a.record_size / 1e9),
                  "rss_mib": b.rss(),
                  "disk_per_acked": (d1[0] - d0[0]) / max(1.0, sent * a.record_size)})
        self.record(r)
        drop_topic(b.bootstrap, topic)

    def rd_e2e(self, rnd: int, system: str, p: int, rate: int) -> None:
        a, b = self.a, self.broker(system)
        topic = self.topic(system, "e2e", p, rate, rnd)
        args = ["consume-tail", "--bootstrap", b.first, "--topic", topic,
                "--partitions", str(p), "--client", "rdkafka", "--acks", "-1", "--record-size", str(a.record_size),
                "--raw-secs", "0", "--producers", "1", "--consumers", "1", "--duration", str(a.rate_duration),
                "--rate", str(rate), "--work-dir", str(self.data / "bench-work")]
        report, _ = rep.run_bench(topic, a.out, args)
        e2e = next(x for x in report["latency"] if x["name"].startswith("end-to-end"))
        ack = latencies(next(x for x in report["latency"] if x["name"].startswith("produce latency")))
        r = self.base(rnd, "e2e-rdkafka", system, p, rate)
        r.update({**latencies(e2e), "cdf": e2e.get("distribution"), "rss_mib": b.rss(),
                  # The same records' send->ack: an e2e tail that equals it waited for the
                  # device (fdatasync), not for the fetch path.
                  "ack_p99_ms": ack["p99_ms"], "ack_max_ms": ack["max_ms"],
                  # The consumer's start-up (librdkafka's first fetch after assign), untimed above.
                  "first_record_ms": rep.figure(
                      report, "[librdkafka] first record's latency (consumer start-up, not timed)", "ms")})
        self.record(r)
        drop_topic(b.bootstrap, topic)

    def java_e2e(self, rnd: int, system: str) -> None:
        """EndToEndLatency: one record produced (acks=all), consumed, then the next."""
        a, b = self.a, self.broker(system)
        topic = self.topic(system, "java-e2e", 1, None, rnd)
        cmd = ["java", "-Xmx512m", "-cp", f"{self.lib}/*", "org.apache.kafka.tools.EndToEndLatency",
               b.bootstrap, topic, str(a.e2e_records), "all", str(a.record_size)]
        out = run_tool(cmd, a.out / f"{topic}.txt")
        avg = re.search(r"Avg latency: ([\d.]+) ms", out)
        pct = re.search(r"Percentiles: 50th = ([\d.]+), 99th = ([\d.]+), 99.9th = ([\d.]+)", out)
        if not (avg and pct):
            raise RuntimeError(f"EndToEndLatency printed no summary:\n{out[-3000:]}")
        r = self.base(rnd, "e2e-java", system, 1, "serial")
        r.update({"avg_ms": float(avg.group(1)), "p50_ms": float(pct.group(1)), "p99_ms": float(pct.group(2)),
                  "p999_ms": float(pct.group(3)), "rss_mib": b.rss()})
        self.record(r)
        drop_topic(b.bootstrap, topic)

    def catchup(self, rnd: int, system: str, p: int) -> None:
        """Writes --dataset, drops the page cache, reads it all from offset 0 (librdkafka); drops
        the cache again and reads it once more with ConsumerPerformance."""
        a, b = self.a, self.broker(system)
        topic = self.topic(system, "catchup", p, None, rnd)
        args = ["consume-disk", "--bootstrap", b.first, "--topic", topic,
                "--partitions", str(p), "--client", "rdkafka", "--acks", "1", "--record-size", str(a.record_size),
                "--raw-secs", "0", "--producers", str(a.producers), "--consumers", "1",
                "--dataset", str(a.dataset), "--drop-caches", "--work-dir", str(self.data / "bench-work")]
        args += ["--broker-pid", str(b.pids[0])] if len(b.pids) == 1 else []
        report, _ = rep.run_bench(topic, a.out, args)
        r = self.base(rnd, "catchup-rdkafka", system, p, "dataset")
        read = rep.figure(report, "dataset read", "MB")
        # The read phase's CPU: weir bench measures it when it knows the broker's pid (one
        # broker); for a cluster the read goes to the leaders, so it is the same process set.
        r.update({"mb_s": rep.figure(report, "weir catch-up read", "MB/s"),
                  "rec_s": rep.figure(report, "weir catch-up read", "records/s"),
                  "cpu_s_per_gb": (rep.figure(report, "broker CPU per GB read", "s/GB")
                                   if len(b.pids) == 1 else None),
                  "read_mb": read, "rss_mib": b.rss()})
        self.record(r)
        drop_caches()
        n = sum(rep.high_watermarks(rep.consumer(b.bootstrap), topic, p))
        cmd = ["java", "-Xmx1g", "-cp", f"{self.lib}/*", "org.apache.kafka.tools.ConsumerPerformance",
               "--bootstrap-server", b.bootstrap, "--topic", topic, "--num-records", str(n),
               "--group", f"perf-{topic}", "--timeout", "60000"]
        c0 = b.cpu()
        out = run_tool(cmd, a.out / f"{topic}-java.txt")
        c1 = b.cpu()
        # start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec,
        # rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
        row = [line for line in out.splitlines() if re.match(r"\d{4}-\d\d-\d\d", line.strip())]
        if not row:
            raise RuntimeError(f"ConsumerPerformance printed no summary:\n{out[-3000:]}")
        f = [x.strip() for x in row[-1].split(",")]
        mb, msgs = float(f[2]) * 1.048576, int(float(f[4]))
        r = self.base(rnd, "catchup-java", system, p, "dataset")
        # fetch.MB.sec / fetch.nMsg.sec: over the fetching time, without the group join.
        r.update({"mb_s": float(f[8]) * 1.048576, "rec_s": float(f[9]),
                  "cpu_s_per_gb": (c1 - c0) / max(1e-9, mb / 1e3), "read_mb": mb,
                  "errors": float(max(0, n - msgs)), "rss_mib": b.rss()})
        self.record(r)
        drop_topic(b.bootstrap, topic)


def latencies(lat: dict) -> dict:
    pc = lat["percentiles"]
    return {"p50_ms": pc["p50"] / 1000, "p99_ms": pc["p99"] / 1000, "p999_ms": pc["p999"] / 1000,
            "max_ms": pc["max"] / 1000}


def run_tool(cmd: list[str], log_path: Path, timeout: float = 900) -> str:
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    out = p.stdout + p.stderr
    log_path.write_text(" ".join(cmd) + "\n" + out)
    if p.returncode != 0:
        raise RuntimeError(f"{cmd[4]} failed ({p.returncode}):\n{out[-3000:]}")
    return out


def drop_caches() -> None:
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--partitions", default="16,100")
    ap.add_argument("--rates", default="2000,20000,200000", help="fixed rates, records/s (empty: none)")
    ap.add_argument("--duration", type=int, default=10, help="seconds of each full-speed run")
    ap.add_argument("--rate-duration", type=int, default=8)
    ap.add_argument("--producers", type=int, default=2)
    ap.add_argument("--record-size", type=int, default=1024)
    ap.add_argument("--systems", default=",".join(SYSTEMS), help="of weir,kafka,kafka-flush1 (acks1 adds "
                    "weir-acks1 and kafka-acks1 when weir and kafka are in)")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--java-records", type=int, default=3_000_000, help="ProducerPerformance at full speed")
    ap.add_argument("--e2e-records", type=int, default=3000, help="EndToEndLatency's serial records")
    ap.add_argument("--dataset", default="4GiB", help="catch-up read: bytes written, then read back")
    ap.add_argument("--brokers", type=int, default=1, choices=(1, 3),
                    help="1: one node of each; 3: a cluster of three of each (topics of --rf replicas)")
    ap.add_argument("--rf", type=int, default=None, help="replication factor of the topics (default: --brokers)")
    ap.add_argument("--kafka-version", default="4.4.0")
    ap.add_argument("--data", type=Path, default=ROOT / "target" / "bench" / "vs-kafka")
    ap.add_argument("--out", type=Path, default=ROOT / "target" / "bench" / "vs-kafka-out")
    ap.add_argument("--smoke", action="store_true")
    a = ap.parse_args()
    a.rf = a.rf or a.brokers
    if a.smoke:
        a.rounds, a.partitions, a.duration, a.rate_duration, a.rates = 1, "16", 3, 3, "20000"
        a.java_records, a.e2e_records, a.dataset = 300_000, 300, "256MiB"
    if not rep.WEIR.is_file():
        sys.exit(f"{rep.WEIR} does not exist: cargo build --release --features rdkafka")
    systems = [s for s in SYSTEMS if s in a.systems.split(",")]
    workloads = [w for w in WORKLOADS if w in a.workloads.split(",")]
    if "catchup" in workloads and os.geteuid() != 0:
        sys.exit("the catch-up read drops the page cache: run as root, or leave out --workloads catchup")
    parts = [int(x) for x in a.partitions.split(",")]
    rates = [int(x) for x in a.rates.split(",") if x.strip()]
    cmd = "python3 benches/vs_kafka.py " + " ".join(sys.argv[1:])
    lib = resolve_kafka(a.kafka_version)
    data = a.data.resolve()
    shutil.rmtree(data, ignore_errors=True)
    data.mkdir(parents=True)
    a.out.mkdir(parents=True, exist_ok=True)
    weir = start_weir(data, a.brokers)
    kafka = start_kafka(lib, data, a.brokers)
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()[0]
    log(f"weir {weir.bootstrap} (pids {weir.pids}, --cores {os.cpu_count()}); Apache Kafka "
        f"{a.kafka_version} {kafka.bootstrap} (pids {kafka.pids}, {java}, {' '.join(KAFKA_JVM[:2])})")
    bench = Bench(a, lib, data, weir, kafka)
    # SIGTERM or Ctrl-C ends the run early: what was measured is still summarized and saved.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        for rnd in range(1, a.rounds + 1):
            def order(xs):
                return list(xs) if rnd % 2 else list(reversed(xs))
            for p in parts:
                for load in [None, *rates]:
                    if "produce" in workloads:
                        for system in order(systems):
                            bench.rd_produce(rnd, "produce-rdkafka", system, p, load, "-1")
                    if "java" in workloads:
                        for system in order(systems):
                            bench.java_produce(rnd, system, p, load)
                if "acks1" in workloads:
                    for system in order([s + "-acks1" for s in systems if s in ("weir", "kafka")]):
                        bench.rd_produce(rnd, "produce-rdkafka", system, p, None, "1")
                if "e2e" in workloads:
                    for rate in rates:
                        for system in order(systems):
                            bench.rd_e2e(rnd, system, p, rate)
                if "catchup" in workloads:
                    for system in order([s for s in systems if s in ("weir", "kafka")]):
                        bench.catchup(rnd, system, p)
            if "e2e" in workloads:
                for system in order(systems):
                    bench.java_e2e(rnd, system)
    except KeyboardInterrupt:
        log(f"interrupted: summarizing the {len(bench.runs)} runs done")
    finally:
        weir.stop()
        kafka.stop()
    runs = bench.runs
    summary(runs, cmd, a.rounds)
    for path in cdf_plots(runs, a.out):
        log(f"latency CDF: {path}")
    (a.out / "vs_kafka.json").write_text(json.dumps({"command": cmd, "kafka": a.kafka_version,
                                                     "jvm": KAFKA_JVM, "runs": runs}, indent=1))
    shutil.rmtree(data, ignore_errors=True)
    return 1 if any(r.get("errors") for r in runs) else 0


COLUMNS = [("MB/s", "mb_s", "{:.1f}"), ("rec/s", "rec_s", "{:.0f}"), ("p50 ms", "p50_ms", "{:.2f}"),
           ("p99 ms", "p99_ms", "{:.2f}"), ("p99.9 ms", "p999_ms", "{:.2f}"), ("max ms", "max_ms", "{:.1f}"),
           ("CPU s/GB", "cpu_s_per_gb", "{:.2f}"), ("RSS MiB", "rss_mib", "{:.0f}"),
           ("disk/acked", "disk_per_acked", "{:.2f}"), ("ack p99 ms", "ack_p99_ms", "{:.2f}"), ("ack max ms", "ack_max_ms", "{:.1f}"),
           ("1st record ms", "first_record_ms", "{:.0f}")]


def summary(runs: list[dict], cmd: str, rounds: int) -> None:
    log(f"\n== weir vs Apache Kafka: medians [min-max] over {rounds} round(s) ==\n{cmd}")
    keys = []
    for r in runs:
        k = (r["workload"], r["partitions"], str(r["load"]), r["system"])
        if k not in keys:
            keys.append(k)
    for wl in dict.fromkeys(k[0] for k in keys):
        cols = [c for c in COLUMNS if any(r.get(c[1]) is not None for r in runs if r["workload"] == wl)]
        log(f"\n{wl}\n{'system':<13} {'parts':<6} {'load':<8} " + " ".join(f"{c[0]:<24}" for c in cols))
        for k in [k for k in keys if k[0] == wl]:
            rs = [r for r in runs if (r["workload"], r["partitions"], str(r["load"]), r["system"]) == k]
            log(f"{k[3]:<13} {k[1]:<6} {k[2]:<8} "
                + " ".join(f"{rep.mm([r[c[1]] for r in rs if r.get(c[1]) is not None], c[2]):<24}" for c in cols))
    log("\nweir / Kafka, paired per round (medians [min-max] of the per-round ratios):")
    for k in keys:
        wl, p, load, system = k
        if not system.startswith("weir"):
            continue
        for other in ("kafka", "kafka-flush1"):
            other = other + system[len("weir"):]
            def paired(key):
                out = []
                for rnd in range(1, rounds + 1):
                    w = [r[key] for r in runs if (r["workload"], r["partitions"], str(r["load"]), r["system"],
                                                   r["round"]) == (wl, p, load, system, rnd) and r.get(key)]
                    o = [r[key] for r in runs if (r["workload"], r["partitions"], str(r["load"]), r["system"],
                                                   r["round"]) == (wl, p, load, other, rnd) and r.get(key)]
                    if w and o:
                        out.append(w[0] / o[0])
                return out
            parts = [f"{name} {rep.mm(paired(key), '{:.2f}')} x" for name, key in
                     [("MB/s", "mb_s"), ("p50", "p50_ms"), ("p99", "p99_ms"), ("CPU s/GB", "cpu_s_per_gb")]
                     if paired(key)]
            if parts:
                log(f"  {wl:<16} p{p:<4} {load:<8} {system} / {other}: " + ", ".join(parts))


def cdf_plots(runs: list[dict], out: Path) -> list[Path]:
    """One SVG per workload and fixed rate: every round's latency distribution per system,
    x = percentile on a 'nines' scale (50, 90, 99, 99.9, ...), y = milliseconds (log)."""
    import math
    colors = {"weir": "#d62728", "kafka": "#1f77b4", "kafka-flush1": "#2ca02c"}
    paths = []
    groups: dict[tuple, list[dict]] = {}
    for r in runs:
        if r.get("cdf") and isinstance(r["load"], int):
            groups.setdefault((r["workload"], r["partitions"], r["load"]), []).append(r)
    for (wl, p, load), rs in groups.items():
        w, h, left, bottom, top = 640, 400, 60, 40, 30
        pts = [(q, us / 1000) for r in rs for q, us in r["cdf"] if us > 0 and q < 100]
        if not pts:
            continue
        lo = math.log10(max(0.01, min(v for _, v in pts)))
        hi = math.log10(max(v for _, v in pts)) + 0.1
        nines_max = max(-math.log10(1 - q / 100) for q, _ in pts)

        def xy(q, ms):
            x = left + (w - left - 20) * (-math.log10(1 - q / 100)) / max(nines_max, 1e-9)
            y = h - bottom - (h - bottom - top) * (math.log10(max(ms, 0.01)) - lo) / max(hi - lo, 1e-9)
            return f"{x:.1f},{y:.1f}"
        svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" '
               f'font-size="11"><rect width="{w}" height="{h}" fill="white"/>',
               f'<text x="{left}" y="18" font-size="13">{wl}, {p} partitions, {load} records/s: '
               f'latency by percentile (every round)</text>']
        for n in range(int(nines_max) + 1):
            x = left + (w - left - 20) * n / max(nines_max, 1e-9)
            label = f"{100 - 100 / 10 ** n:g}" if n else "0"
            svg.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{h - bottom}" stroke="#ddd"/>'
                       f'<text x="{x:.1f}" y="{h - bottom + 14}" text-anchor="middle">p{label}</text>')
        for e in range(math.floor(lo), math.ceil(hi) + 1):
            if lo <= e <= hi:
                y = h - bottom - (h - bottom - top) * (e - lo) / max(hi - lo, 1e-9)
                svg.append(f'<line x1="{left}" y1="{y:.1f}" x2="{w - 20}" y2="{y:.1f}" stroke="#ddd"/>'
                           f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">{10 ** e:g} ms</text>')
        for i, r in enumerate(rs):
            c = colors.get(r["system"], "#555")
            line = " ".join(xy(q, us / 1000) for q, us in r["cdf"] if q < 100)
            svg.append(f'<polyline fill="none" stroke="{c}" stroke-width="1.5" points="{line}"/>')
        for i, s in enumerate(dict.fromkeys(r["system"] for r in rs)):
            svg.append(f'<text x="{left + 10}" y="{top + 16 + 14 * i}" fill="{colors.get(s, "#555")}">{s}</text>')
        svg.append("</svg>")
        path = out / f"cdf-{wl}-p{p}-{load}.svg"
        path.write_text("\n".join(svg))
        paths.append(path)
    return paths


if __name__ == "__main__":
    sys.exit(main())
