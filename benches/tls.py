#!/usr/bin/env python3
"""TLS cost (issue 18): produce and consume through the SSL listener vs the plaintext one.

Starts its own weir broker (target/release/weir) in a temp dir under target/ with
`listeners=PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0` and a throwaway CA and certificate
(tests/tls_certs.py). Then, alternating the listeners for --rounds rounds, confluent-kafka
(librdkafka, as the test suite) produces --records records of --record-size bytes to a fresh
topic and consumes them back from offset 0. For each phase: client-side MB/s, and the broker's
CPU time (utime + stime from /proc/PID/stat) per GB moved, the figure TLS costs the broker.
Medians over the rounds; the ratio SSL / plaintext at the end.

    cargo build --release && python3 benches/tls.py [--records 200000] [--record-size 1024] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition, OFFSET_BEGINNING
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from tls_certs import Ca  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def broker_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def start_broker(tmp: Path, ca: Ca, cores: int) -> tuple[subprocess.Popen, str, str]:
    server = ca.issue("server", server=True)
    log = open(tmp / "weir.log", "w")
    proc = subprocess.Popen(
        [str(ROOT / "target/release/weir"), "serve", "--data-dir", str(tmp / "data"), "--cores", str(cores),
         "--set", "listeners=PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
         "--set", f"ssl.certificate.location={server.cert}", "--set", f"ssl.key.location={server.key}",
         "--set", "metrics.listen=off"], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 30
    while time.time() < deadline:
        text = (tmp / "weir.log").read_text()
        m, s = re.search(r"listening on (127\.0\.0\.1:\d+)", text), re.search(r"SSL listener on (127\.0\.0\.1:\d+)", text)
        if m and s:
            return proc, m.group(1), s.group(1)
        time.sleep(0.05)
    proc.kill()
    sys.exit("broker did not start:\n" + (tmp / "weir.log").read_text())


def produce(conf: dict, topic: str, records: int, size: int) -> float:
    p = Producer({**conf, "linger.ms": 5, "batch.size": 1 << 20, "acks": 1, "enable.idempotence": False,
                  "queue.buffering.max.kbytes": 1 << 20})
    value = os.urandom(size)
    t0 = time.monotonic()
    for i in range(records):
        while True:
            try:
                p.produce(topic, value, partition=i % 2)
                break
            except BufferError:
                p.poll(0.01)
    assert p.flush(120) == 0, "undelivered records"
    return time.monotonic() - t0


def consume(conf: dict, topic: str, records: int) -> float:
    c = Consumer({**conf, "group.id": f"bench-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False,
                  "fetch.max.bytes": 64 << 20, "max.partition.fetch.bytes": 8 << 20})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(2)])
    got, t0 = 0, time.monotonic()
    while got < records:
        for m in c.consume(num_messages=10000, timeout=1.0):
            assert m.error() is None, m.error()
            got += 1
        assert time.monotonic() - t0 < 300, f"consumed {got} of {records}"
    took = time.monotonic() - t0
    c.close()
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--record-size", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cores", type=int, default=1, help="broker cores (default 1: its CPU is one core's)")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-tls-", dir=ROOT / "target"))
    ca = Ca(tmp / "certs", "bench-ca")
    proc, plain, ssl = start_broker(tmp, ca, a.cores)
    confs = {
        "PLAINTEXT": {"bootstrap.servers": plain, "broker.address.family": "v4"},
        "SSL": {"bootstrap.servers": ssl, "broker.address.family": "v4", "security.protocol": "SSL",
                "ssl.ca.location": str(ca.pem)},
    }
    gb = a.records * a.record_size / 1e9
    res: dict[tuple[str, str], list[tuple[float, float]]] = {}
    try:
        for r in range(a.rounds):
            for name, conf in confs.items():
                topic = f"bench-{name.lower()}-{r}"
                admin = AdminClient(conf)
                admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
                time.sleep(0.5)
                for phase, run in (("produce", lambda: produce(conf, topic, a.records, a.record_size)),
                                   ("consume", lambda: consume(conf, topic, a.records))):
                    cpu0 = broker_cpu_s(proc.pid)
                    took = run()
                    cpu = broker_cpu_s(proc.pid) - cpu0
                    res.setdefault((name, phase), []).append((gb * 1000 / took, cpu / gb))
                    print(f"round {r} {name:9} {phase}: {gb * 1000 / took:7.1f} MB/s, broker CPU "
                          f"{cpu / gb:6.2f} s/GB", file=sys.stderr)
    finally:
        proc.terminate()
        proc.wait(30)
    print(f"\n{a.records} records x {a.record_size} B, 2 partitions, {a.cores} broker core(s), "
          f"median of {a.rounds} rounds")
    print(f"{'phase':8} {'listener':9} {'MB/s':>8} {'broker CPU s/GB':>16}")
    med = {k: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)) for k, v in res.items()}
    for phase in ("produce", "consume"):
        for name in confs:
            mbs, cpu = med[(name, phase)]
            print(f"{phase:8} {name:9} {mbs:8.1f} {cpu:16.2f}")
        (pm, pc), (sm, sc) = med[("PLAINTEXT", phase)], med[("SSL", phase)]
        print(f"{phase:8} {'SSL/PT':9} {sm / pm:8.2f} {sc / pc:16.2f}")


if __name__ == "__main__":
    main()
