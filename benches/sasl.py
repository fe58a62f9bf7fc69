#!/usr/bin/env python3
"""SASL + ACL cost (issue 18): produce and consume through a SASL_PLAINTEXT listener (SCRAM-SHA-256)
with the authorizer on, vs the plaintext listener of the same broker.

Starts its own weir broker (target/release/weir, one core) in a temp dir under target/ with
`listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0`, `authorizer.class.name=weir`,
a user made with `weir user add` and ACLs made with `weir acl add` (ALL on the bench topics and
groups). Then, alternating the listeners for --rounds rounds, confluent-kafka produces --records
records of --record-size bytes (acks=1, linger 5 ms) to a fresh topic and consumes them back
from offset 0. For each phase: client MB/s and the broker's CPU seconds (utime + stime from
/proc/PID/stat) per GB; medians over the rounds. Every request on the SASL listener is checked
against the ACLs, so the CPU figure is what authentication and authorization cost the broker.

    cargo build --release && python3 benches/sasl.py [--records 200000] [--record-size 1024] [--rounds 4]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

ROOT = Path(__file__).resolve().parent.parent
WEIR = ROOT / "target" / "release" / "weir"


def start(workdir: Path) -> tuple[subprocess.Popen, dict[str, str]]:
    out = workdir / "weir.out"
    p = subprocess.Popen([str(WEIR), "serve", "--data-dir", str(workdir / "data"), "--cores", "1",
                          "--set", "metrics.listen=off",
                          "--set", "listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
                          "--set", "authorizer.class.name=weir", "--set", "super.users=User:ANONYMOUS"],
                         stdout=open(out, "wb"), stderr=subprocess.DEVNULL)
    deadline = time.time() + 30
    while time.time() < deadline:
        text = out.read_text()
        if "listening on" in text:
            return p, dict(re.findall(r"(\w+) listener on (127\.0\.0\.1:\d+)", text))
        time.sleep(0.05)
    p.kill()
    raise SystemExit("weir did not start")


def cpu_s(pid: int) -> float:
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def one_round(pid: int, conf: dict, topic: str, records: int, size: int) -> tuple[float, float, float, float]:
    producer = Producer({**conf, "linger.ms": 5, "acks": 1, "enable.idempotence": False})
    value = b"x" * size
    c0, t0 = cpu_s(pid), time.time()
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, value, partition=0)
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(60) == 0, "produce did not complete"
    produce = (time.time() - t0, cpu_s(pid) - c0)
    consumer = Consumer({**conf, "group.id": f"{topic}-g", "fetch.max.bytes": 64 << 20})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got, c0, t0 = 0, cpu_s(pid), time.time()
    while got < records:
        got += sum(1 for m in consumer.consume(10000, 1.0) if not m.error())
    consume = (time.time() - t0, cpu_s(pid) - c0)
    consumer.close()
    mb, gb = records * size / 1e6, records * size / 1e9
    return mb / produce[0], produce[1] / gb, mb / consume[0], consume[1] / gb


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--record-size", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=4)
    a = ap.parse_args()
    (ROOT / "target").mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=ROOT / "target", prefix="bench-sasl-") as tmp:
        p, ports = start(Path(tmp))
        try:
            plain = ports["PLAINTEXT"]
            for args in (["user", "add", "bench", "--password", "bench-pw"],
                         ["acl", "add", "--principal", "User:bench", "--operation", "all", "--topic", "bench-",
                          "--prefixed"],
                         ["acl", "add", "--principal", "User:bench", "--operation", "all", "--group", "bench-",
                          "--prefixed"]):
                subprocess.run([str(WEIR), *args, "--bootstrap", plain], check=True, capture_output=True)
            confs = {
                "plaintext": {"bootstrap.servers": plain},
                "sasl+acl": {"bootstrap.servers": ports["SASL_PLAINTEXT"], "security.protocol": "SASL_PLAINTEXT",
                             "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "bench",
                             "sasl.password": "bench-pw"},
            }
            results: dict[str, list] = {k: [] for k in confs}
            for r in range(a.rounds):
                for mode, conf in confs.items():
                    topic = f"bench-{mode.replace('+', '-')}-{r}"
                    results[mode].append(one_round(p.pid, conf, topic, a.records, a.record_size))
        finally:
            p.terminate()
            p.wait(30)
    print(f"{a.records} x {a.record_size} B, {a.rounds} rounds, medians (client MB/s, broker CPU s/GB):")
    for mode, rs in results.items():
        m = [statistics.median(x[i] for x in rs) for i in range(4)]
        print(f"  {mode:10} produce {m[0]:6.0f} MB/s {m[1]:5.2f} s/GB | consume {m[2]:6.0f} MB/s {m[3]:5.2f} s/GB"
              f"   (rounds: {[tuple(round(v, 2) for v in x) for x in rs]})")


if __name__ == "__main__":
    main()
