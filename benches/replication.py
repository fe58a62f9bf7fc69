#!/usr/bin/env python3
"""What replication costs (issue 19 step 5): produce acks=all at replication factor 3 against
replication factor 1, on one machine, beside the single-node broker and the machine's yardsticks.

Starts four `weir serve` processes (target/release/weir; WEIR_BIN overrides) with --cores C each
(default 1): one standalone broker (no --peers: today's single-node path, no Raft) and a cluster
of three (--node-id 1-3, --peers on free ports), all on 127.0.0.1, port 0, data under --data
(default target/bench/replication; point it at the filesystem to measure). Every round:

  1. the yardsticks: `weir bench raw` (direct 1 MiB writes and reads of a preallocated file on the
     --data filesystem, 8 / 16 in flight, then one loopback TCP stream; --raw-secs each);
  2. fresh topics of --partitions partitions: `single` (RF 1 on the standalone broker), `rf1`
     and `rf3` (RF 1 and RF 3 on the cluster), each partition led before the clock starts, and
     rf3's leaders on distinct brokers when there are as many partitions as brokers (each
     partition's preferred replica campaigns first and placement spreads them, so this holds
     at the first try; the topic is made again, up to 5 times, if it does not);
  3. for each configuration, in an order that alternates from round to round (so drift hits
     all): `weir bench produce --client rdkafka --acks -1` at full speed (--producers, --duration
     s), then at each fixed rate of --rates (records/s, one producer, --rate-duration s);
     `--client native` runs weir's own client instead (it follows the leaders across brokers
     too);
  4. after every run, the guard: no delivery error, the high watermarks (ListOffsets on the
     leaders) grew by exactly the records acknowledged, and for rf3 every replica's log end
     offset (each broker's `weir_partition_log_end_offset`) equals that high watermark within
     15 s. A failed guard marks the run and the script exits 1: a benchmark whose replication
     silently failed is worthless;
  5. the topics are deleted (replicated partitions have no retention yet).

`--configs ...,rf3tls` adds a second cluster of three whose brokers talk over mutual TLS
(`security.inter.broker.protocol=SSL`, certificates from tests/tls_certs.py; the first cluster
uses PLAINTEXT between brokers), with its own RF 3 topic, run in the same rounds: the summary
then gives what TLS between brokers costs (throughput ratio, broker CPU s/GB, latency).

Where the time goes, per run: CPU of each broker and of the load generator (utime + stime from
/proc; the generator's from wait4), of everything else on the machine and idle (/proc/stat), as %
of one CPU (the machine has `nproc` of them), and the run's brokers' CPU seconds per GB
acknowledged; the device's MB written and cache flushes per second
(/proc/diskstats of the --data device) and MB written per MB acknowledged; fdatasyncs of the
topic's partitions per broker (`weir_flush_duration_seconds_count`).

Output: one line per run, then the summary (medians [min-max] over the rounds; RF3/RF1 is
paired within each round); everything also in --out/replication.json, each run's own `weir bench`
report in --out/<config>-<load>-r<round>.{json,txt}.

    cargo build --release --features rdkafka && python3 benches/replication.py [--rounds 3] [--duration 6]
        [--rates 2000,20000] [--rate-duration 5] [--producers 2] [--partitions 3] [--cores 1]
        [--raw-secs 1] [--client rdkafka|native] [--configs single,rf1,rf3] [--data DIR]
        [--out DIR] [--keep] [--smoke] [--perf-stat] [--broker-set KEY=VALUE ...] [--linger-ms 1]

--perf-stat: per run, the run's brokers' page faults, context switches, io_uring_enter and mmap
calls per second (`perf stat`, kept in --out/<run>.perf). --broker-set: `weir serve --set` for
every broker (e.g. cache.bytes.per.core=16777216, so that a short run sees the cache full).

--smoke: one round, 2 s runs, one rate (about 30 s): checks the script and the guard.
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
import urllib.request
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parent.parent
WEIR = Path(os.environ.get("WEIR_BIN", ROOT / "target" / "release" / "weir"))
TICKS = os.sysconf("SC_CLK_TCK")
NODE_ID_STRIDE = 1024  # node id = broker * 1024 + core with listeners.per.core
CONFIGS = ("single", "rf1", "rf3", "rf3tls")
DEFAULT_CONFIGS = ("single", "rf1", "rf3")
# `--broker-set KEY=VALUE`: settings every broker of this run gets.
BROKER_SETTINGS: list[str] = []
# What `--perf-stat` counts on the run's brokers (per second of the run).
PERF_EVENTS = {"page-faults": "faults", "context-switches": "ctx",
               "syscalls:sys_enter_io_uring_enter": "uring_enter", "syscalls:sys_enter_mmap": "mmap"}


def log(msg: str) -> None:
    print(msg, flush=True)


# -- brokers ---------------------------------------------------------------------------------------


class Broker:
    def __init__(self, name: str, data: Path, cores: int, extra: list[str]):
        self.name = name
        self.dir = data / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.out = self.dir / "weir.out"
        args = [str(WEIR), "serve", "--data-dir", str(self.dir / "data"), "--listen", "127.0.0.1:0",
                "--set", "metrics.listen=127.0.0.1:0", "--cores", str(cores)] + extra
        for kv in BROKER_SETTINGS:
            args += ["--set", kv]
        self.proc = subprocess.Popen(args, stdout=open(self.out, "wb"), stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        deadline = time.time() + 30
        while time.time() < deadline:
            text = self.out.read_text(errors="replace")
            m = re.search(r"listening on (127\.0\.0\.1:\d+)", text)
            mm = re.search(r"metrics on (http://\S+)", text)
            if m and mm:
                self.bootstrap, self.metrics_url = m.group(1), mm.group(1)
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.proc.kill()
        sys.exit(f"{name}: weir serve did not start:\n{self.out.read_text(errors='replace')[-3000:]}")

    def cpu(self) -> float:
        return proc_cpu(self.proc.pid)

    def metrics(self, topic: str) -> dict[str, dict[int, float]]:
        """{family: {partition: value}} of the topic's per-partition families we use."""
        text = urllib.request.urlopen(self.metrics_url, timeout=10).read().decode()
        out: dict[str, dict[int, float]] = {}
        for m in re.finditer(r'^(weir_partition_log_end_offset|weir_flush_duration_seconds_count|weir_flush_duration_seconds_sum)'
                             r'\{([^}]*)\} (\S+)$', text, re.M):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
            if labels.get("topic") == topic:
                out.setdefault(m.group(1), {})[int(labels["partition"])] = float(m.group(3))
        return out

    def produce_requests(self) -> tuple[float, float]:
        """(Produce requests answered, seconds they spent in the broker) so far, all cores."""
        text = urllib.request.urlopen(self.metrics_url, timeout=10).read().decode()
        n = t = 0.0
        for m in re.finditer(r'^weir_request_duration_seconds_(count|sum)\{[^}]*api="Produce"[^}]*\} (\S+)$',
                             text, re.M):
            if m.group(1) == "count":
                n += float(m.group(2))
            else:
                t += float(m.group(2))
        return n, t

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            sys.exit(f"{self.name} died (code {self.proc.returncode}):\n"
                     f"{self.out.read_text(errors='replace')[-3000:]}")


def proc_cpu(pid: int) -> float:
    """utime + stime of a process (all its threads), seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def machine_cpu() -> tuple[float, float]:
    """(busy, idle) CPU seconds of the whole machine since boot (/proc/stat)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]  # idle + iowait
    return (sum(v[:8]) - idle) / TICKS, idle / TICKS


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def device_of(path: Path) -> str | None:
    """The /proc/diskstats name of the block device holding `path` (the whole disk's, for a
    partition or a device-mapper target we cannot map, None)."""
    st = os.stat(path)
    major, minor = os.major(st.st_dev), os.minor(st.st_dev)
    with open("/proc/diskstats") as f:
        for line in f:
            p = line.split()
            if int(p[0]) == major and int(p[1]) == minor:
                return p[2]
    return None


def disk_counters(dev: str | None) -> tuple[float, float]:
    """(bytes written, flush requests completed) of the device so far."""
    if dev is None:
        return 0.0, 0.0
    with open("/proc/diskstats") as f:
        for line in f:
            p = line.split()
            if p[2] == dev:
                flushes = float(p[18]) if len(p) > 18 else 0.0
                return float(p[9]) * 512, flushes
    return 0.0, 0.0


# -- topics ----------------------------------------------------------------------------------------


def wait_for(what: str, check, timeout: float = 60.0, every: float = 0.2):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = check()
            if last:
                return last
        except Exception as e:  # noqa: BLE001 - retried until the deadline, then reported
            last = e
        time.sleep(every)
    raise RuntimeError(f"{what}: not within {timeout}s (last: {last!r})")


def consumer(bootstrap: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": "weir-bench-replication",
                     "enable.auto.commit": False})


def high_watermarks(c: Consumer, topic: str, partitions: int) -> list[int]:
    """ListOffsets LATEST of each partition, from its leader (retried while librdkafka's view
    of the leaders is stale: NOT_LEADER_OR_FOLLOWER)."""
    def ask():
        return [c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
                for p in range(partitions)]
    return wait_for(f"{topic} high watermarks", ask, timeout=30)


def leaders(c: Consumer, topic: str) -> dict[int, int]:
    md = c.list_topics(topic, timeout=10).topics[topic]
    if md.error is not None:
        raise RuntimeError(str(md.error))
    return {p: pm.leader for p, pm in md.partitions.items()}


def create_topic(admin: AdminClient, c: Consumer, topic: str, partitions: int, rf: int,
                 spread: bool) -> dict[int, int]:
    """Creates the topic, waits until each partition is led and answers ListOffsets; with
    `spread`, makes it again until its leaders are on distinct brokers. Returns {p: leader}."""
    for attempt in range(5):
        admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=rf)],
                            request_timeout=30)[topic].result(60)
        wait_for(f"{topic} led", lambda: min(leaders(c, topic).values()) >= 0
                 and len(high_watermarks(c, topic, partitions)) == partitions)
        if rf > 1:
            # The first leader is named in Metadata once its PartitionLeader record is applied
            # (docs/replication.md, "Leadership in Metadata"): wait until the leaders settle.
            time.sleep(1.0)
            high_watermarks(c, topic, partitions)
        led = leaders(c, topic)
        brokers = {n // NODE_ID_STRIDE for n in led.values()}
        if not spread or len(brokers) == len(led):
            return led
        log(f"  [{topic}: leaders on brokers {sorted(n // NODE_ID_STRIDE for n in led.values())}, "
            f"not spread; making it again ({attempt + 1}/5)]")
        delete_topic(admin, c, topic)
    return led


def delete_topic(admin: AdminClient, c: Consumer, topic: str) -> None:
    admin.delete_topics([topic], request_timeout=30)[topic].result(60)
    wait_for(f"{topic} deleted", lambda: topic not in c.list_topics(timeout=10).topics)


# -- one run ---------------------------------------------------------------------------------------


def figure(report: dict, name: str, unit: str) -> float:
    for f in report["figures"]:
        if f["name"] == name and f["unit"] == unit:
            return f["value"]
    raise KeyError(f"{name} [{unit}] not in the report")


def run_bench(name: str, out: Path, args: list[str]) -> tuple[dict, float]:
    """Runs `weir bench ...`; returns its JSON report and its own CPU seconds (wait4)."""
    json_path, txt = out / f"{name}.json", out / f"{name}.txt"
    cmd = [str(WEIR), "bench", *args, "--json", str(json_path), "--svg", str(out / f"{name}.svg")]
    with open(txt, "wb") as f:
        f.write((" ".join(cmd) + "\n").encode())
        p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise RuntimeError(f"weir bench failed ({p.returncode}):\n{txt.read_text(errors='replace')[-3000:]}")
    return json.loads(json_path.read_text()), ru.ru_utime + ru.ru_stime


class Runner:
    def __init__(self, a: argparse.Namespace, data: Path, out: Path):
        self.a, self.data, self.out = a, data, out
        self.dev = device_of(data)
        self.failures: list[str] = []
        self.runs: list[dict] = []

    def run(self, rnd: int, config: str, load: str, topic: str, brokers: list[Broker],
            c: Consumer, rate: int | None) -> dict:
        a = self.a
        parts = a.partitions
        before_hw = high_watermarks(c, topic, parts)
        before_leaders = leaders(c, topic)
        before_flush = {b.name: self.flushes(b, topic) for b in brokers}
        before_req = [b.produce_requests() for b in brokers]
        cpu0 = {b.name: b.cpu() for b in self.all_brokers}
        m0 = machine_cpu()
        d0 = disk_counters(self.dev)
        t0 = time.monotonic()
        bench_args = ["produce", "--bootstrap", brokers[0].bootstrap, "--topic", topic,
                      "--partitions", str(parts), "--client", a.client, "--acks", "-1",
                      "--record-size", str(a.record_size), "--raw-secs", "0", "--linger-ms", str(a.linger_ms),
                      "--work-dir", str(self.data / "bench-work")]
        if rate is None:
            bench_args += ["--producers", str(a.producers), "--duration", str(a.duration)]
        else:
            bench_args += ["--producers", "1", "--duration", str(a.rate_duration), "--rate", str(rate)]
        name = f"{config}-{load.replace('/s', '')}-r{rnd}"
        perf = None
        if a.perf_stat:
            perf = subprocess.Popen(["perf", "stat", "-x,", "-o", str(self.out / f"{name}.perf"),
                                     "-e", ",".join(PERF_EVENTS),
                                     "-p", ",".join(str(b.proc.pid) for b in brokers)],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        report, bench_cpu = run_bench(name, self.out, bench_args)
        wall = time.monotonic() - t0
        events = {}
        if perf is not None:
            perf.send_signal(signal.SIGINT)
            perf.wait()
            events = perf_counts(self.out / f"{name}.perf", wall)
        d1 = disk_counters(self.dev)
        m1 = machine_cpu()
        cpu = {b.name: (b.cpu() - cpu0[b.name]) / wall * 100 for b in self.all_brokers}
        cpu["bench"] = bench_cpu / wall * 100
        ours = sum(cpu.values())
        cpu["others"] = max(0.0, (m1[0] - m0[0]) / wall * 100 - ours)
        cpu["idle"] = (m1[1] - m0[1]) / wall * 100
        lat = report["latency"][0]["percentiles"]
        acked = int(figure(report, "records acknowledged", "records"))
        r = {
            "round": rnd, "config": config, "load": load, "rate": rate, "topic": topic,
            "mb_s": figure(report, "weir produce", "MB/s"),
            "rec_s": figure(report, "weir produce", "records/s"),
            "acked": acked, "errors": int(figure(report, "produce errors", "records")),
            "p50_ms": lat["p50"] / 1000, "p99_ms": lat["p99"] / 1000, "p999_ms": lat["p999"] / 1000,
            "cpu_pct": cpu, "wall_s": wall, "brokers": [b.name for b in brokers], "events_s": events,
            "disk_mb_s": (d1[0] - d0[0]) / wall / 1e6,
            "disk_flushes_s": (d1[1] - d0[1]) / wall,
        }
        acked_mb = acked * a.record_size / 1e6
        r["disk_per_acked"] = (d1[0] - d0[0]) / 1e6 / acked_mb if acked_mb else 0.0
        r["guard"] = self.guard(config, topic, brokers, c, before_hw, acked, r["errors"])
        # An election during a run would explain an outlier: say so.
        after_leaders = leaders(c, topic)
        r["leaders_moved"] = after_leaders != before_leaders
        if r["leaders_moved"]:
            r["guard"] += f" [leaders moved: {before_leaders} -> {after_leaders}]"
        after_req = [b.produce_requests() for b in brokers]
        reqs = sum(x[0] - y[0] for x, y in zip(after_req, before_req))
        # How long the brokers held a Produce (acks=all: until committed), and how big it was.
        r["produce_req_ms"] = sum(x[1] - y[1] for x, y in zip(after_req, before_req)) * 1000 / max(1.0, reqs)
        r["produce_req_kib"] = acked * a.record_size / 1024 / max(1.0, reqs)
        after_flush = {b.name: self.flushes(b, topic) for b in brokers}
        r["fsyncs_s"] = {n: (after_flush[n][0] - before_flush[n][0]) / wall for n in after_flush}
        # Mean time of one fdatasync of the topic's partitions, per broker.
        r["fsync_ms"] = {n: (after_flush[n][1] - before_flush[n][1]) * 1000
                         / max(1.0, after_flush[n][0] - before_flush[n][0]) for n in after_flush}
        self.runs.append(r)
        self.print_run(r)
        return r

    @staticmethod
    def flushes(b: Broker, topic: str) -> tuple[float, float]:
        """(fdatasyncs, seconds spent in them) of the topic's partitions on this broker so far."""
        m = b.metrics(topic)
        return (sum(m.get("weir_flush_duration_seconds_count", {}).values()),
                sum(m.get("weir_flush_duration_seconds_sum", {}).values()))

    def guard(self, config: str, topic: str, brokers: list[Broker], c: Consumer,
              before_hw: list[int], acked: int, errors: int) -> str:
        parts = self.a.partitions
        problems = []
        if errors:
            problems.append(f"{errors} delivery errors")
        hw = high_watermarks(c, topic, parts)
        grown = sum(hw) - sum(before_hw)
        if grown != acked:
            problems.append(f"high watermarks grew by {grown}, {acked} records acknowledged")
        if config.startswith("rf3"):
            def replicas_agree():
                ends = {b.name: b.metrics(topic).get("weir_partition_log_end_offset", {}) for b in brokers}
                bad = {n: e for n, e in ends.items() if [int(e.get(p, -1)) for p in range(parts)] != hw}
                return True if not bad else None
            try:
                wait_for("replicas at the high watermark", replicas_agree, timeout=15)
            except RuntimeError:
                ends = {b.name: b.metrics(topic).get("weir_partition_log_end_offset", {}) for b in brokers}
                problems.append(f"replica log ends {ends} != high watermarks {hw}")
        for b in self.all_brokers:
            b.check_alive()
        if problems:
            msg = f"{config} {topic}: " + "; ".join(problems)
            self.failures.append(msg)
            return "FAILED: " + "; ".join(problems)
        return (f"ok (hw +{grown} = acked; 3 replicas at hw {hw})" if config.startswith("rf3")
                else f"ok (hw +{grown} = acked)")

    def print_run(self, r: dict) -> None:
        cpu = r["cpu_pct"]
        cpus = " ".join(f"{k} {v:.0f}" for k, v in cpu.items()) + f" (brokers {broker_cpu_s_per_gb(r):.2f} s/GB)"
        fs = " ".join(f"{k} {v:.0f} ({r['fsync_ms'][k]:.1f} ms)" for k, v in r["fsyncs_s"].items())
        log(f"  r{r['round']} {r['config']:<6} {r['load']:<5} {r['mb_s']:7.1f} MB/s {r['rec_s']:9.0f} rec/s  "
            f"ack p50 {r['p50_ms']:7.2f} p99 {r['p99_ms']:7.2f} p999 {r['p999_ms']:7.2f} ms | "
            f"CPU% {cpus} | disk {r['disk_mb_s']:.0f} MB/s ({r['disk_per_acked']:.2f} x acked), "
            f"{r['disk_flushes_s']:.0f} flushes/s | fdatasyncs/s (mean) {fs} | Produce in broker "
            f"{r['produce_req_ms']:.1f} ms, {r['produce_req_kib']:.0f} KiB | guard {r['guard']}"
            + ("" if not r.get("events_s") else " | brokers per s: "
               + ", ".join(f"{k} {v:.0f}" for k, v in r["events_s"].items())))


def perf_counts(path: Path, wall: float) -> dict[str, float]:
    """`perf stat -x,` output: each of PERF_EVENTS per second of the run (all its brokers)."""
    out = {}
    for line in path.read_text().splitlines():
        f = line.split(",")
        if len(f) > 2 and f[2] in PERF_EVENTS and f[0].strip().isdigit():
            out[PERF_EVENTS[f[2]]] = int(f[0]) / wall
    return out


def broker_cpu_s_per_gb(r: dict) -> float:
    """CPU seconds of the run's brokers (leaders and followers) per GB acknowledged."""
    pct = sum(r["cpu_pct"][name] for name in r["brokers"])
    gb = r["mb_s"] * r["wall_s"] / 1000
    return pct / 100 * r["wall_s"] / gb if gb else float("nan")


# -- summary ---------------------------------------------------------------------------------------


def mm(xs: list[float], fmt: str = "{:.1f}") -> str:
    if not xs:
        return "-"
    return f"{fmt.format(statistics.median(xs))} [{fmt.format(min(xs))}-{fmt.format(max(xs))}]"


def summary(a: argparse.Namespace, runs: list[dict], raws: list[dict], cmd: str, shared: str) -> None:
    loads = ["full"] + [f"{r}/s" for r in a.rate_list]
    log("")
    log(f"== replication cost: produce acks=all through {a.client}, medians [min-max] over "
        f"{a.rounds} round(s) ==")
    log(cmd)
    log(shared)
    log("yardsticks (weir bench raw, once per round): raw write "
        f"{mm([x['disk_write_bps'] / 1e6 for x in raws], '{:.0f}')} MB/s, raw read "
        f"{mm([x['disk_read_bps'] / 1e6 for x in raws], '{:.0f}')} MB/s, loopback TCP "
        f"{mm([x['tcp_bps'] / 1e6 for x in raws], '{:.0f}')} MB/s")

    def sel(config, load):
        return [r for r in runs if r["config"] == config and r["load"] == load]

    log(f"{'config':<8} {'load':<9} {'MB/s':<22} {'records/s':<26} {'ack p50 ms':<22} {'p99 ms':<22} "
        f"{'p999 ms':<22} {'disk MB/acked MB':<18} {'broker CPU s/GB':<22} CPU % (brokers / bench / others / idle)")
    for load in loads:
        for config in CONFIGS:
            rs = sel(config, load)
            if not rs:
                continue
            cpu = {k: statistics.median([r["cpu_pct"][k] for r in rs]) for k in rs[0]["cpu_pct"]}
            brokers = "+".join(f"{v:.0f}" for k, v in cpu.items() if k not in ("bench", "others", "idle"))
            log(f"{config:<8} {load:<9} {mm([r['mb_s'] for r in rs]):<22} "
                f"{mm([r['rec_s'] for r in rs], '{:.0f}'):<26} {mm([r['p50_ms'] for r in rs], '{:.2f}'):<22} "
                f"{mm([r['p99_ms'] for r in rs], '{:.2f}'):<22} {mm([r['p999_ms'] for r in rs], '{:.2f}'):<22} "
                f"{mm([r['disk_per_acked'] for r in rs], '{:.2f}'):<18} "
                f"{mm([broker_cpu_s_per_gb(r) for r in rs], '{:.2f}'):<22} "
                f"{brokers} / {cpu['bench']:.0f} / {cpu['others']:.0f} / {cpu['idle']:.0f}")

    def paired(load, key, num, den, op):
        out = []
        for rnd in range(1, a.rounds + 1):
            x = [r for r in runs if r["round"] == rnd and r["load"] == load and r["config"] == num]
            y = [r for r in runs if r["round"] == rnd and r["load"] == load and r["config"] == den]
            if x and y:
                out.append(op(x[0][key], y[0][key]))
        return out

    def ratio(x, y):
        return x / y if y else float("nan")

    def diff(x, y):
        return x - y
    log("")
    log("RF3 / RF1 (cluster) full-speed throughput, paired per round: "
        f"{mm(paired('full', 'mb_s', 'rf3', 'rf1', ratio), '{:.2f}')} x; "
        f"RF3 / single node: {mm(paired('full', 'mb_s', 'rf3', 'single', ratio), '{:.2f}')} x; "
        f"RF1 cluster / single node: {mm(paired('full', 'mb_s', 'rf1', 'single', ratio), '{:.2f}')} x")
    for load in loads[1:]:
        log(f"latency cost of RF3 over RF1 at {load}: p50 "
            f"{mm(paired(load, 'p50_ms', 'rf3', 'rf1', diff), '{:+.2f}')} ms, p99 "
            f"{mm(paired(load, 'p99_ms', 'rf3', 'rf1', diff), '{:+.2f}')} ms, p999 "
            f"{mm(paired(load, 'p999_ms', 'rf3', 'rf1', diff), '{:+.2f}')} ms; RF3 p50 "
            f"{mm([r['p50_ms'] for r in sel('rf3', load)], '{:.2f}')} vs RF1 "
            f"{mm([r['p50_ms'] for r in sel('rf1', load)], '{:.2f}')} vs single "
            f"{mm([r['p50_ms'] for r in sel('single', load)], '{:.2f}')} ms")
    log("Produce request time in the brokers (acks=all: until committed), full speed: "
        + ", ".join(f"{cfg} {mm([r['produce_req_ms'] for r in sel(cfg, 'full')], '{:.1f}')} ms "
                    f"({mm([r['produce_req_kib'] for r in sel(cfg, 'full')], '{:.0f}')} KiB each)"
                    for cfg in CONFIGS if sel(cfg, "full")))
    for cfg in ("rf3", "rf3tls"):
        full3 = sel(cfg, "full")
        if full3:
            log(f"{cfg} full speed: fdatasyncs/s per broker "
                + ", ".join(f"{b} {mm([r['fsyncs_s'][b] for r in full3], '{:.0f}')}" for b in full3[0]["fsyncs_s"])
                + f"; device {mm([r['disk_mb_s'] for r in full3], '{:.0f}')} MB/s written, "
                f"{mm([r['disk_flushes_s'] for r in full3], '{:.0f}')} cache flushes/s")
    if sel("rf3tls", "full"):
        def cpu_per_gb(r, names):
            gb = r["mb_s"] * r["wall_s"] / 1000
            return sum(r["cpu_pct"][n] for n in names) / 100 * r["wall_s"] / gb if gb else float("nan")
        log("mutual TLS between brokers (rf3tls) over PLAINTEXT (rf3), paired per round: full-speed "
            f"throughput {mm(paired('full', 'mb_s', 'rf3tls', 'rf3', ratio), '{:.2f}')} x, broker CPU s/GB "
            f"{mm([cpu_per_gb(r, ('t1', 't2', 't3')) for r in sel('rf3tls', 'full')], '{:.2f}')} vs "
            f"{mm([cpu_per_gb(r, ('b1', 'b2', 'b3')) for r in sel('rf3', 'full')], '{:.2f}')}")
        for load in loads[1:]:
            log(f"  at {load}: p50 {mm(paired(load, 'p50_ms', 'rf3tls', 'rf3', diff), '{:+.2f}')} ms, p99 "
                f"{mm(paired(load, 'p99_ms', 'rf3tls', 'rf3', diff), '{:+.2f}')} ms, p999 "
                f"{mm(paired(load, 'p999_ms', 'rf3tls', 'rf3', diff), '{:+.2f}')} ms (rf3tls - rf3)")


# -- main ------------------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=6, help="seconds of each full-speed run")
    ap.add_argument("--rates", default="2000,20000", help="fixed rates, records/s (empty: none)")
    ap.add_argument("--rate-duration", type=int, default=5)
    ap.add_argument("--producers", type=int, default=2, help="producers at full speed")
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--record-size", type=int, default=1024)
    ap.add_argument("--cores", type=int, default=1, help="--cores of every weir serve")
    ap.add_argument("--raw-secs", type=float, default=1.0)
    ap.add_argument("--data", type=Path, default=Path(os.environ.get("WEIR_BENCH_DATA",
                                                                    ROOT / "target" / "bench" / "replication")))
    ap.add_argument("--out", type=Path, default=ROOT / "target" / "bench" / "replication-out")
    ap.add_argument("--keep", action="store_true", help="keep --data after the run")
    ap.add_argument("--client", default="rdkafka", choices=["rdkafka", "native"],
                    help="load generator's client (both follow leaders across brokers)")
    ap.add_argument("--configs", default=",".join(DEFAULT_CONFIGS),
                    help="which of single,rf1,rf3,rf3tls to run (rf3tls: a second cluster of three "
                         "whose brokers talk over mutual TLS; the others use PLAINTEXT between brokers)")
    ap.add_argument("--smoke", action="store_true", help="one round, 2 s runs, one rate")
    ap.add_argument("--linger-ms", type=int, default=1,
                    help="the producers' linger.ms (weir bench's default 1; librdkafka's own is 5)")
    ap.add_argument("--perf-stat", action="store_true",
                    help="count the run's brokers' page faults, context switches, io_uring_enter and "
                         "mmap calls (perf stat; root or perf_event_paranoid <= 0)")
    ap.add_argument("--broker-set", action="append", default=[], metavar="KEY=VALUE",
                    help="a setting for every broker (weir serve --set), repeatable")
    a = ap.parse_args()
    BROKER_SETTINGS.extend(a.broker_set)
    if a.smoke:
        a.rounds, a.duration, a.rate_duration, a.rates, a.raw_secs = 1, 2, 2, "2000", 0.5
    a.rate_list = [int(x) for x in a.rates.split(",") if x.strip()]
    if not WEIR.is_file():
        sys.exit(f"{WEIR} does not exist: cargo build --release --features rdkafka")
    cmd = "python3 benches/replication.py " + " ".join(sys.argv[1:])
    data = a.data.resolve()
    if data.exists():
        shutil.rmtree(data)
    data.mkdir(parents=True)
    a.out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()

    ports = free_ports(3)
    voters = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(ports))
    single = Broker("single", data, a.cores, [])
    cluster = [Broker(f"b{i + 1}", data, a.cores, ["--node-id", str(i + 1), "--peers", voters,
                                                  "--set", "security.inter.broker.protocol=PLAINTEXT"])
               for i in range(3)]
    tls_cluster: list[Broker] = []
    if "rf3tls" in a.configs.split(","):
        sys.path.insert(0, str(ROOT / "tests"))
        from tls_certs import peer_tls_settings  # noqa: E402 - the tests' certificate helper
        tls_ports = free_ports(3)
        tls_voters = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(tls_ports))
        for i in range(3):
            sets = peer_tls_settings(data / "certs", f"t{i + 1}", "127.0.0.1")
            tls_cluster.append(Broker(f"t{i + 1}", data, a.cores,
                                      ["--node-id", str(i + 1), "--peers", tls_voters]
                                      + [x for k, v in sets.items() for x in ("--set", f"{k}={v}")]))
    runner = Runner(a, data, a.out)
    runner.all_brokers = cluster + [single] + tls_cluster
    raws: list[dict] = []
    shared = (f"shared: {os.cpu_count()} CPUs for {len(runner.all_brokers)} weir serve processes of --cores "
              f"{a.cores} (the standalone one and the cluster's three"
              f"{', and the TLS cluster' + chr(39) + 's three' if tls_cluster else ''}, all running throughout) "
              f"and the load generator "
              f"({a.client}); one disk ({runner.dev or 'unknown device'}, data under {data}) for every "
              f"replica; loopback TCP between the brokers and to the client")
    clients = []
    try:
        c_all = consumer(",".join(b.bootstrap for b in cluster))
        c_single = consumer(single.bootstrap)
        clients += [c_all, c_single]
        every_node = {b * NODE_ID_STRIDE + core for b in (1, 2, 3) for core in range(a.cores)}
        wait_for("every broker registered", lambda: every_node <= set(c_all.list_topics(timeout=10).brokers))
        c_tls = admin_t = None
        if tls_cluster:
            c_tls = consumer(",".join(b.bootstrap for b in tls_cluster))
            clients.append(c_tls)
            wait_for("every TLS-cluster broker registered",
                     lambda: every_node <= set(c_tls.list_topics(timeout=10).brokers))
            admin_t = AdminClient({"bootstrap.servers": tls_cluster[0].bootstrap})
        admin_c = AdminClient({"bootstrap.servers": cluster[0].bootstrap})
        admin_s = AdminClient({"bootstrap.servers": single.bootstrap})
        log(f"brokers: single {single.bootstrap}, cluster "
            + ", ".join(f"{b.name} {b.bootstrap}" for b in cluster) + f"; --cores {a.cores} each")
        log(shared)
        for rnd in range(1, a.rounds + 1):
            raw, _ = run_bench(f"raw-r{rnd}", a.out, ["raw", "--raw-secs", str(a.raw_secs),
                                                      "--work-dir", str(data / "raw-work")])
            sample = raw["raw_mean"]
            raws.append(sample)
            log(f"round {rnd}: yardsticks: raw write {sample['disk_write_bps'] / 1e6:.0f} MB/s, raw read "
                f"{sample['disk_read_bps'] / 1e6:.0f} MB/s, loopback TCP {sample['tcp_bps'] / 1e6:.0f} MB/s")
            topics = {"single": f"single-r{rnd}", "rf1": f"rf1-r{rnd}", "rf3": f"rf3-r{rnd}",
                      "rf3tls": f"rf3tls-r{rnd}"}
            spread = a.partitions == 3
            led = {
                "single": create_topic(admin_s, c_single, topics["single"], a.partitions, 1, False),
                "rf1": create_topic(admin_c, c_all, topics["rf1"], a.partitions, 1, spread),
                "rf3": create_topic(admin_c, c_all, topics["rf3"], a.partitions, 3, spread),
            }
            if tls_cluster:
                led["rf3tls"] = create_topic(admin_t, c_tls, topics["rf3tls"], a.partitions, 3, spread)
            log(f"  leaders (broker of each partition): rf1 "
                f"{[n // NODE_ID_STRIDE for _, n in sorted(led['rf1'].items())]}, rf3 "
                f"{[n // NODE_ID_STRIDE for _, n in sorted(led['rf3'].items())]}")
            chosen = [x for x in CONFIGS if x in a.configs.split(",")]
            order = chosen if rnd % 2 else list(reversed(chosen))
            for config in order:
                brokers, c = {"single": ([single], c_single), "rf3tls": (tls_cluster, c_tls)}.get(
                    config, (cluster, c_all))
                runner.run(rnd, config, "full", topics[config], brokers, c, None)
                for rate in a.rate_list:
                    runner.run(rnd, config, f"{rate}/s", topics[config], brokers, c, rate)
            delete_topic(admin_s, c_single, topics["single"])
            delete_topic(admin_c, c_all, topics["rf1"])
            delete_topic(admin_c, c_all, topics["rf3"])
            if tls_cluster:
                delete_topic(admin_t, c_tls, topics["rf3tls"])
        summary(a, runner.runs, raws, cmd, shared)
        (a.out / "replication.json").write_text(json.dumps(
            {"command": cmd, "shared": shared, "rounds": a.rounds, "raw": raws, "runs": runner.runs,
             "failures": runner.failures}, indent=1))
        log(f"\nall figures: {a.out / 'replication.json'}; {time.monotonic() - started:.0f} s in all")
    finally:
        for c in clients:
            c.close()
        for b in [single, *cluster, *tls_cluster]:
            b.stop()
        if not a.keep:
            shutil.rmtree(data, ignore_errors=True)
    if runner.failures:
        log("GUARD FAILED: " + " | ".join(runner.failures))
        return 1
    log("guard: every run's records acknowledged without error, high watermarks grew by exactly the "
        "acknowledged records, and every rf3 replica reached the high watermark")
    return 0


if __name__ == "__main__":
    sys.exit(main())
