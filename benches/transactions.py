#!/usr/bin/env python3
"""Idempotence and transactions cost (issue 16): produce with enable.idempotence off vs on, and
transactional produce (transactions of N records committed back to back), on one broker.

Starts its own weir broker (target/release/weir, default settings: every core; port 0; metrics on
port 0) in a temp dir under target/. Each round of each mode produces --records records of
--record-size bytes to a fresh topic of 4 partitions (round robin, partition = i % 4) with a fresh
confluent-kafka (librdkafka) producer: acks=all, linger.ms=5, everything else librdkafka's
default. Modes, alternating for --rounds rounds (the order rotates from round to round):

  plain        enable.idempotence=false, max.in.flight=5
  idempotent   enable.idempotence=true (librdkafka then caps max.in.flight at 5 itself)
  txn-N        transactional.id set (so idempotent too): begin_transaction(), N records, flush(),
               commit_transaction(), back to back (N from --txn-sizes, default 1000 and 10000)

Before the clock starts each producer has its metadata and producer id: one record per partition
is produced and acknowledged (in a transaction of its own for txn-N; librdkafka's idempotent
producer otherwise spends its first 0.5-1 s waiting for its producer id). Per round: client MB/s
and records/s (first produce() to the last record acknowledged and, for txn-N, the last commit
answered); CPU seconds per GB (utime + stime from /proc) of the broker, of Python's main thread
(which calls produce()) and of librdkafka's threads; from the broker's metrics, the fdatasyncs of
the topic's partitions (weir_flush_duration_seconds: acks=all appends and markers; the
transaction log's own are not in it) and the mean time a Produce, AddPartitionsToTxn and EndTxn
request spent in the broker (weir_request_duration_seconds); from librdkafka's statistics (every
100 ms) the requests awaiting a response, its retries and its largest round trip. For txn-N also
commits/s and the latency of flush() (the transaction's last records acknowledged) and of
commit_transaction() after it (EndTxn alone: the coordinator stores PrepareCommit, appends and
flushes a marker on each partition, stores CompleteCommit). Every round is checked: the high
watermarks add up to the records sent (plus one marker per partition per transaction for txn-N),
and for txn-N the read_committed end offsets (last stable offsets) equal them.

Then the commit cost by partitions touched (--sweep): --sweep-txns transactions of one 100-byte
record on each of k partitions (a topic of k partitions per k, the ks interleaved);
commit_transaction() latency, the broker's CPU per transaction and its fdatasyncs of those
partitions.

Medians over the rounds, min-max in brackets; the ratios to plain are of the same run. Every
figure also goes to target/bench/transactions.json.

    cargo build --release && python3 benches/transactions.py [--records 200000] [--record-size 1024]
        [--rounds 8] [--txn-sizes 1000,10000] [--cores N] [--sweep 1,2,4,8,16] [--sweep-txns 100]
        [--dir target]
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
import urllib.request
from pathlib import Path

from confluent_kafka import IsolationLevel, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

ROOT = Path(__file__).resolve().parent.parent
WEIR = ROOT / "target" / "release" / "weir"
PARTITIONS = 4
TICKS = os.sysconf("SC_CLK_TCK")


def start(workdir: Path, cores: int | None) -> tuple[subprocess.Popen, str, str]:
    out = workdir / "weir.out"
    args = [str(WEIR), "serve", "--data-dir", str(workdir / "data"), "--listen", "127.0.0.1:0",
            "--set", "metrics.listen=127.0.0.1:0"]
    if cores:
        args += ["--cores", str(cores)]
    p = subprocess.Popen(args, stdout=open(out, "wb"), stderr=subprocess.STDOUT)
    deadline = time.time() + 30
    while time.time() < deadline:
        text = out.read_text(errors="replace")
        m = re.search(r"listening on (127\.0\.0\.1:\d+)", text)
        if m:
            return p, m.group(1), re.search(r"metrics on (http://\S+)", text).group(1)
        time.sleep(0.05)
    p.kill()
    sys.exit("weir did not start:\n" + out.read_text(errors="replace"))


def cpu_s(stat: str) -> float:
    f = Path(stat).read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TICKS


def own_cpu_s() -> tuple[float, float]:
    """This process's CPU seconds: (Python's main thread, every other thread: librdkafka's)."""
    main = cpu_s(f"/proc/self/task/{os.getpid()}/stat")
    return main, cpu_s("/proc/self/stat") - main


def scrape(metrics: str) -> list[tuple[str, str, float]]:
    out = []
    for line in urllib.request.urlopen(metrics, timeout=10).read().decode().splitlines():
        m = re.match(r"(\w+)\{(.*)\} (\S+)$", line)
        if m:
            out.append((m.group(1), m.group(2), float(m.group(3))))
    return out


APIS = ("Produce", "AddPartitionsToTxn", "EndTxn")


def broker_counts(metrics: str, topic: str) -> dict[str, float]:
    """From the broker's metrics: fdatasyncs of `topic`'s partitions (count, seconds); requests
    and their time in the broker (decoded to answered) for APIS; Produce requests slower than
    100 ms; error codes returned."""
    c = {"syncs": 0.0, "sync_s": 0.0, "produce_fast": 0.0, "errors": 0.0}
    c.update({f"{api}_{k}": 0.0 for api in APIS for k in ("n", "s")})
    for name, labels, v in scrape(metrics):
        api = re.search(r'api="(\w+)"', labels)
        api = api.group(1) if api else None
        if f'topic="{topic}"' in labels:
            if name == "weir_flush_duration_seconds_count":
                c["syncs"] += v
            elif name == "weir_flush_duration_seconds_sum":
                c["sync_s"] += v
        elif api in APIS and name == "weir_request_duration_seconds_count":
            c[f"{api}_n"] += v
        elif api in APIS and name == "weir_request_duration_seconds_sum":
            c[f"{api}_s"] += v
        elif api == "Produce" and name == "weir_request_duration_seconds_bucket" and 'le="0.1"' in labels:
            c["produce_fast"] += v
        elif name == "weir_request_errors_total":
            c["errors"] += v
    return c


def broker_ms(d: dict[str, float], api: str) -> float:
    """Mean time in the broker of `api`'s requests, from a difference of broker_counts."""
    return d[f"{api}_s"] / d[f"{api}_n"] * 1e3 if d[f"{api}_n"] else float("nan")


class Stats:
    """librdkafka's statistics (every 100 ms): retries so far, the largest request round trip, and
    the requests awaiting a response (all connections) at each report."""

    def __init__(self) -> None:
        self.retries, self.rtt_max_ms, self.waitresp = 0, 0.0, []

    def __call__(self, text: str) -> None:
        brokers = [b for b in json.loads(text).get("brokers", {}).values() if b.get("nodeid", -1) >= 0]
        self.retries = sum(b.get("txretries", 0) for b in brokers)
        self.rtt_max_ms = max([self.rtt_max_ms] + [b.get("rtt", {}).get("max", 0) / 1e3 for b in brokers])
        self.waitresp.append(sum(b.get("waitresp_cnt", 0) for b in brokers))


def create(admin: AdminClient, topic: str, partitions: int) -> None:
    for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        f.result(30)
    deadline = time.time() + 30
    while time.time() < deadline:
        t = admin.list_topics(topic, timeout=10).topics.get(topic)
        if t and not t.error and len(t.partitions) == partitions:
            return
        time.sleep(0.05)
    sys.exit(f"topic {topic} did not appear")


def end_offsets(admin: AdminClient, topic: str, partitions: int, level: IsolationLevel) -> int:
    req = {TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)}
    res = admin.list_offsets(req, isolation_level=level, request_timeout=30)
    return sum(f.result().offset for f in res.values())


def producer_conf(bootstrap: str, mode: str) -> dict:
    conf = {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5}
    if mode == "plain":
        conf.update({"enable.idempotence": False, "max.in.flight": 5})
    elif mode == "idempotent":
        conf["enable.idempotence"] = True
    else:
        conf["transactional.id"] = f"bench-{mode}-{os.getpid()}"
    return conf


def send(p: Producer, topic: str, value: bytes, first: int, n: int) -> None:
    for i in range(first, first + n):
        while True:
            try:
                p.produce(topic, value, partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.005)


def one_round(pid: int, admin: AdminClient, bootstrap: str, metrics: str, mode: str, topic: str, records: int,
              size: int) -> dict:
    create(admin, topic, PARTITIONS)
    stats = Stats()
    p = Producer({**producer_conf(bootstrap, mode), "statistics.interval.ms": 100, "stats_cb": stats})
    txn = int(mode.split("-")[1]) if mode.startswith("txn-") else 0
    # Before the clock starts: connected, metadata known, producer id acquired (InitProducerId;
    # librdkafka's idempotent producer takes 0.5-1 s for it), by one record to each partition
    # acknowledged (in a transaction of its own for txn-N).
    if txn:
        p.init_transactions(30)
        p.begin_transaction()
    send(p, topic, b"w", 0, PARTITIONS)
    assert p.flush(30) == 0, "warm-up records not acknowledged"
    if txn:
        p.commit_transaction(30)
    p.poll(0.15)
    retries0, stats.rtt_max_ms, stats.waitresp = stats.retries, 0.0, []
    value = os.urandom(size)
    flushes, commits = [], []
    b0 = broker_counts(metrics, topic)
    c0, (m0, l0), t0 = cpu_s(f"/proc/{pid}/stat"), own_cpu_s(), time.monotonic()
    if txn:
        for first in range(0, records, txn):
            p.begin_transaction()
            send(p, topic, value, first, min(txn, records - first))
            a = time.monotonic()
            assert p.flush(60) == 0, "records not acknowledged"
            b = time.monotonic()
            p.commit_transaction(60)
            flushes.append(b - a)
            commits.append(time.monotonic() - b)
    else:
        send(p, topic, value, 0, records)
        assert p.flush(120) == 0, "records not acknowledged"
    secs, cpu, (m1, l1) = time.monotonic() - t0, cpu_s(f"/proc/{pid}/stat") - c0, own_cpu_s()
    b1 = broker_counts(metrics, topic)
    waitresp = stats.waitresp[:]
    p.poll(0.15)  # one more statistics report
    # Every record arrived once (and the warm-up records); one marker per partition per
    # transaction (round robin: every transaction touches all partitions, the warm-up's too);
    # read_committed sees up to the end.
    expected = PARTITIONS + records + ((len(commits) * min(PARTITIONS, txn) + PARTITIONS) if txn else 0)
    hw = end_offsets(admin, topic, PARTITIONS, IsolationLevel.READ_UNCOMMITTED)
    assert hw == expected, f"{mode} {topic}: high watermarks add up to {hw}, expected {expected}"
    if txn:
        lso = end_offsets(admin, topic, PARTITIONS, IsolationLevel.READ_COMMITTED)
        assert lso == hw, f"{mode} {topic}: read_committed end offsets {lso} != high watermarks {hw}"
    for f in admin.delete_topics([topic]).values():
        f.result(30)
    gb = records * size / 1e9
    d = {k: b1[k] - b0[k] for k in b0}
    return {"mbs": records * size / 1e6 / secs, "rps": records / secs, "secs": secs,
            "cpu_gb": cpu / gb, "py_cpu_gb": (m1 - m0) / gb, "rd_cpu_gb": (l1 - l0) / gb,
            "syncs_s": d["syncs"] / secs, "sync_us": d["sync_s"] / max(1, d["syncs"]) * 1e6,
            "produce_reqs": d["Produce_n"], "produce_slow": d["Produce_n"] - d["produce_fast"], "errors": d["errors"],
            "produce_ms": broker_ms(d, "Produce"), "addparts_ms": broker_ms(d, "AddPartitionsToTxn"),
            "endtxn_ms": broker_ms(d, "EndTxn"),
            "retries": stats.retries - retries0, "rtt_max_ms": stats.rtt_max_ms,
            "inflight": statistics.mean(waitresp) if waitresp else float("nan"),
            "commits": len(commits), "cps": len(commits) / secs if txn else 0.0,
            "flush_ms": [x * 1e3 for x in flushes], "commit_ms": [x * 1e3 for x in commits]}


def pressure() -> dict[str, float]:
    """/proc/pressure/{cpu,io} "some" totals (µs): the time some task waited for a CPU / for I/O."""
    out = {}
    for what in ("cpu", "io"):
        try:
            line = Path(f"/proc/pressure/{what}").read_text().splitlines()[0]
            out[what] = float(line.rsplit("total=", 1)[1])
        except (OSError, IndexError, ValueError):
            out[what] = float("nan")
    return out


def sweep(pid: int, admin: AdminClient, bootstrap: str, metrics: str, ks: list[int], txns: int) -> dict[int, dict]:
    """Transactions of one 100-byte record on each of k partitions (a topic of k partitions per
    k), the ks interleaved: commit_transaction() latency, the broker's CPU per transaction, the
    fdatasyncs of those partitions."""
    for k in ks:
        create(admin, f"bench-txn-sweep-{k}", k)
    p = Producer({**producer_conf(bootstrap, "txn-sweep"), "linger.ms": 0})
    p.init_transactions(30)
    out = {k: {"commit_ms": [], "cpu_ms": 0.0, "syncs": (0, 0.0)} for k in ks}
    warm = 5
    for rep in range(txns + warm):
        for k in ks:
            topic = f"bench-txn-sweep-{k}"
            if rep == warm:
                c = broker_counts(metrics, topic)
                out[k]["syncs"] = (c["syncs"], c["sync_s"])
            c0 = cpu_s(f"/proc/{pid}/stat")
            p.begin_transaction()
            for part in range(k):
                p.produce(topic, b"v" * 100, partition=part)
            assert p.flush(30) == 0
            a = time.monotonic()
            p.commit_transaction(30)
            if rep >= warm:
                out[k]["commit_ms"].append((time.monotonic() - a) * 1e3)
                out[k]["cpu_ms"] += (cpu_s(f"/proc/{pid}/stat") - c0) * 1e3 / txns
    for k in ks:
        c = broker_counts(metrics, f"bench-txn-sweep-{k}")
        n0, s0 = out[k]["syncs"]
        out[k]["syncs"] = ((c["syncs"] - n0) / txns, (c["sync_s"] - s0) / max(1, c["syncs"] - n0) * 1e6)
    return out


def fmt(xs: list[float], f: str = ".0f") -> str:
    return f"{statistics.median(xs):{f}} [{min(xs):{f}}-{max(xs):{f}}]"


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000, help="records per round (default 200000)")
    ap.add_argument("--record-size", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=8, help="rounds of each mode (default 8; 0: the sweep only)")
    ap.add_argument("--txn-sizes", default="1000,10000", help="records per transaction, comma separated")
    ap.add_argument("--cores", type=int, default=None, help="broker cores (default: weir's, every CPU)")
    ap.add_argument("--sweep", default="1,2,4,8,16", help="partitions per transaction for the commit sweep "
                    "('' to skip)")
    ap.add_argument("--sweep-txns", type=int, default=100)
    ap.add_argument("--dir", default=str(ROOT / "target"), help="where the broker's temp data dir goes "
                    "(default target/; e.g. /dev/shm to take the disk out: fdatasync is then nearly free)")
    a = ap.parse_args()
    modes = ["plain", "idempotent"] + [f"txn-{int(n)}" for n in a.txn_sizes.split(",") if n]
    ks = [int(k) for k in a.sweep.split(",") if k]
    (ROOT / "target").mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=ROOT / "target", prefix="bench-txn-") as tmp:
        p, bootstrap, metrics = start(Path(tmp), a.cores)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        try:
            psi0, w0 = pressure(), time.monotonic()
            results: dict[str, list[dict]] = {m: [] for m in modes}
            for r in range(a.rounds):
                order = modes[r % len(modes):] + modes[:r % len(modes)]
                for mode in order:
                    res = one_round(p.pid, admin, bootstrap, metrics, mode, f"bench-{mode}-{r}", a.records,
                                    a.record_size)
                    results[mode].append(res)
                    extra = (f", {res['commits']} commits, commit p50 {statistics.median(res['commit_ms']):.1f} "
                             f"max {max(res['commit_ms']):.1f} ms, flush() max {max(res['flush_ms']):.1f} ms; in the "
                             f"broker AddPartitionsToTxn {res['addparts_ms']:.2f} ms, EndTxn {res['endtxn_ms']:.2f} ms"
                             if res["commits"] else "")
                    print(f"round {r} {mode:10} {res['mbs']:4.0f} MB/s {res['rps']:6.0f} rec/s; CPU s/GB broker "
                          f"{res['cpu_gb']:4.2f} python {res['py_cpu_gb']:4.2f} librdkafka {res['rd_cpu_gb']:4.2f}; "
                          f"{res['syncs_s']:4.0f} fdatasync/s of {res['sync_us']:4.0f} us; "
                          f"{res['produce_reqs']:.0f} produce requests ({res['produce_ms']:.2f} ms in the broker, "
                          f"{res['produce_slow']:.0f} > 100 ms, "
                          f"rtt max {res['rtt_max_ms']:.0f} ms, {res['inflight']:.1f} in flight), {res['retries']} retries, "
                          f"{res['errors']:.0f} errors{extra}", file=sys.stderr, flush=True)
            psi1, w1 = pressure(), time.monotonic()
            sw = sweep(p.pid, admin, bootstrap, metrics, ks, a.sweep_txns) if ks else {}
            psi2, w2 = pressure(), time.monotonic()
        finally:
            del admin  # its connections close before the broker stops (no librdkafka disconnect logs)
            p.terminate()
            p.wait(30)
    out = ROOT / "target" / "bench" / "transactions.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": vars(a), "rounds": results, "sweep": sw}, indent=1))
    if a.rounds:
        base = statistics.median(x["mbs"] for x in results["plain"])
        psi = {k: (psi1[k] - psi0[k]) / 1e6 / (w1 - w0) * 100 for k in psi0}
        print(f"{a.records} x {a.record_size} B per round, {PARTITIONS} partitions, acks=all, linger.ms=5, "
              f"{a.rounds} rounds in {w1 - w0:.0f} s; median [min-max]; machine meanwhile: some task waiting for "
              f"a CPU {psi['cpu']:.0f}% / for I/O {psi['io']:.0f}% of the time (/proc/pressure)\n")
        print("| mode | MB/s | records/s | / plain (median of per-round ratios) | CPU s/GB: broker | python "
              "| librdkafka | requests in flight | Produce ms in broker | fdatasync/s | fdatasync us | commits/s "
              "| flush() ms | commit_transaction() ms | AddPartitionsToTxn / EndTxn ms in broker |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for mode, rs in results.items():
            mbs = [x["mbs"] for x in rs]
            ratio = statistics.median(x["mbs"] / y["mbs"] for x, y in zip(rs, results["plain"]))
            txn = mode.startswith("txn-")
            cps = fmt([x["cps"] for x in rs], ".1f") if txn else "—"
            fl = [v for x in rs for v in x["flush_ms"]]
            cm = [v for x in rs for v in x["commit_ms"]]
            fls = f"{fmt(fl, '.1f')}, p99 {pct(fl, 0.99):.1f}" if txn else "—"
            cms = f"{fmt(cm, '.1f')}, p99 {pct(cm, 0.99):.1f}" if txn else "—"
            txnb = (f"{statistics.median(x['addparts_ms'] for x in rs):.2f} / "
                    f"{statistics.median(x['endtxn_ms'] for x in rs):.2f}" if txn else "—")
            print(f"| {mode} | {fmt(mbs)} | {fmt([x['rps'] for x in rs])} | {statistics.median(mbs) / base:.2f} "
                  f"({ratio:.2f}) | {fmt([x['cpu_gb'] for x in rs], '.2f')} | {fmt([x['py_cpu_gb'] for x in rs], '.2f')} "
                  f"| {fmt([x['rd_cpu_gb'] for x in rs], '.2f')} | {fmt([x['inflight'] for x in rs], '.1f')} "
                  f"| {fmt([x['produce_ms'] for x in rs], '.2f')} | {fmt([x['syncs_s'] for x in rs])} "
                  f"| {fmt([x['sync_us'] for x in rs])} | {cps} | {fls} | {cms} | {txnb} |")
    if ks:
        psi = {k: (psi2[k] - psi1[k]) / 1e6 / (w2 - w1) * 100 for k in psi0}
        print(f"\ncommit_transaction() by partitions touched: {a.sweep_txns} transactions each of one 100 B record "
              f"per partition, interleaved, {w2 - w1:.0f} s; machine meanwhile: CPU {psi['cpu']:.0f}% / "
              f"I/O {psi['io']:.0f}%\n")
        print("| partitions | commit ms, median [min-max] | p90 | broker CPU ms per transaction | partition "
              "fdatasyncs per transaction | their mean us |")
        print("|---|---|---|---|---|---|")
        for k, v in sw.items():
            xs = v["commit_ms"]
            print(f"| {k} | {fmt(xs, '.2f')} | {pct(xs, 0.9):.2f} | {v['cpu_ms']:.2f} | {v['syncs'][0]:.1f} "
                  f"| {v['syncs'][1]:.0f} |")


if __name__ == "__main__":
    main()
