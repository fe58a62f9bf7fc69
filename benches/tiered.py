#!/usr/bin/env python3
"""Tiered storage (issue 41): uploads against full-speed produce, the catch-up read of tiered
data against the same data on the local disk, and both against the object store's own GET
throughput, all in the same run.

One `weir serve` (target/release/weir; WEIR_BIN overrides) with an S3 bucket on a local
versitygw (tests/s3_support.py: built from the Go module proxy, posix backend on the same
filesystem as weir's data). Two topics of one partition, 64 MiB segments (--segment):

  local    an ordinary topic
  tiered   remote.storage.enable=true, local.retention.bytes=--local (128 MiB)

Steps:
1. Produce --dataset (1 GiB) of --record-size (4 KiB) records into each topic at full speed
   (`weir bench produce --client rdkafka`, acks=all): MB/s of each, and for `tiered` the
   upload lag (weir_remote_upload_lag_bytes) sampled every 0.2 s: its maximum during the
   produce, and the seconds from the end of the produce until it is 0 (uploads keeping up).
2. Local disk use of each topic after the retention pass (closed segments; the active one is
   preallocated).
3. Catch-up reads from offset 0 with librdkafka (confluent-kafka, one consumer, 4 KiB
   records), the page cache dropped before each: `local`, then `tiered` (all but the last
   --local bytes come from the bucket): MB/s and broker CPU seconds per GB read.
4. The store's own GET throughput: the same `.log` objects read sequentially in 4 MiB ranged
   GETs (weir's remote chunk size) by a plain HTTP client, page cache dropped first.

Ratios printed: tiered / local catch-up, tiered catch-up / raw GET. Needs root (drop caches).

    cargo build --release --features rdkafka && python3 benches/tiered.py [--dataset 1GiB]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import threading
import time
import urllib.request
from pathlib import Path

import confluent_kafka
import confluent_kafka.admin

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benches"))
import replication as rep  # noqa: E402 - the weir broker and /proc helpers
from s3_support import S3Server  # noqa: E402

BUCKET = "bench-tier"


def size(v: str) -> int:
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    for u, m in units.items():
        if v.endswith(u):
            return int(float(v[: -len(u)]) * m)
    return int(v)


def drop_caches() -> None:
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def metric(url: str, name: str, topic: str) -> float:
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and f'topic="{topic}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def produce_exact(bootstrap: str, topic: str, dataset: int, record: int) -> float:
    """Writes `dataset` bytes of `record`-byte records with librdkafka; MB/s acknowledged."""
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                                  "batch.size": 1 << 20, "queue.buffering.max.kbytes": 1 << 20,
                                  "compression.type": "none"})
    value = os.urandom(record)
    n = dataset // record
    t0 = time.monotonic()
    for i in range(n):
        while True:
            try:
                p.produce(topic, value, key=str(i).encode(), partition=0)
                break
            except BufferError:
                p.poll(0.01)
        if i % 1000 == 0:
            p.poll(0)
    left = p.flush(120)
    assert left == 0, f"{left} records not acknowledged"
    return n * record / 1e6 / (time.monotonic() - t0)


def catchup(bootstrap: str, topic: str, pid: int, n: int) -> tuple[float, float, int]:
    """Reads all `n` records of partition 0 from offset 0; (MB/s, broker CPU s per GB, bytes)."""
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{topic}-{time.time()}",
                                  "enable.auto.commit": False, "fetch.max.bytes": 64 << 20,
                                  "max.partition.fetch.bytes": 16 << 20, "queued.max.messages.kbytes": 256 << 10})
    c.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
    got, nbytes = 0, 0
    first = None
    cpu0 = rep.proc_cpu(pid)
    deadline = time.monotonic() + 600
    while got < n and time.monotonic() < deadline:
        for m in c.consume(10_000, 1.0):
            if m.error():
                raise RuntimeError(m.error())
            if first is None:
                first = time.monotonic()
            got += 1
            nbytes += len(m.value())
    end = time.monotonic()
    cpu = rep.proc_cpu(pid) - cpu0
    c.close()
    assert got == n, f"read {got} of {n} records of {topic}"
    return nbytes / 1e6 / (end - first), cpu / (nbytes / 1e9), nbytes


def raw_gets(s3: S3Server, keys: list[tuple[str, int]]) -> tuple[float, int]:
    """Sequential 4 MiB ranged GETs of every object: (MB/s, bytes)."""
    chunk = 4 << 20
    total = 0
    t0 = time.monotonic()
    for key, length in keys:
        pos = 0
        while pos < length:
            data = s3.get_object(BUCKET, key, (pos, min(length, pos + chunk) - 1))
            total += len(data)
            pos += chunk
    return total / 1e6 / (time.monotonic() - t0), total


def closed_bytes(d: Path) -> int:
    return sum(f.stat().st_size for f in d.glob("*.log") if f.with_suffix(".index").exists())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="1GiB")
    ap.add_argument("--record-size", type=int, default=4096)
    ap.add_argument("--segment", default="64MiB")
    ap.add_argument("--local", default="128MiB", help="local.retention.bytes of the tiered topic")
    ap.add_argument("--out", type=Path, default=ROOT / "target" / "bench" / "tiered-out")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("the catch-up reads drop the page cache: run as root")
    dataset, segment, local = size(a.dataset), size(a.segment), size(a.local)
    data = ROOT / "target" / "bench" / "tiered"
    shutil.rmtree(data, ignore_errors=True)
    data.mkdir(parents=True)
    a.out.mkdir(parents=True, exist_ok=True)
    results: dict = {"dataset_bytes": dataset, "record_size": a.record_size, "segment_bytes": segment,
                     "local_retention_bytes": local}
    with S3Server(data / "s3") as s3:
        s3.create_bucket(BUCKET)
        os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"] = s3.access_key, s3.secret_key
        b = rep.Broker("weir", data, os.cpu_count() or 1, [
            "--set", "remote.log.storage.system.enable=true", "--set", f"remote.log.storage.s3.bucket={BUCKET}",
            "--set", f"remote.log.storage.s3.endpoint={s3.endpoint}",
            "--set", "remote.log.manager.task.interval.ms=500", "--set", "log.retention.check.interval.ms=500"])
        try:
            admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": b.bootstrap})
            for topic, conf in (("local", {}), ("tiered", {"remote.storage.enable": "true",
                                                            "local.retention.bytes": str(local)})):
                conf = {"segment.bytes": str(segment), **conf}
                admin.create_topics([confluent_kafka.admin.NewTopic(topic, 1, 1, config=conf)])[topic].result(30)
            time.sleep(1)
            n = dataset // a.record_size
            results["produce_local_mb_s"] = produce_exact(b.bootstrap, "local", dataset, a.record_size)
            # The upload lag while the tiered topic is written at full speed.
            lag_max, stop = [0.0], threading.Event()

            def sample():
                while not stop.is_set():
                    lag_max[0] = max(lag_max[0], metric(b.metrics_url, "weir_remote_upload_lag_bytes", "tiered"))
                    time.sleep(0.2)

            t = threading.Thread(target=sample, daemon=True)
            t.start()
            results["produce_tiered_mb_s"] = produce_exact(b.bootstrap, "tiered", dataset, a.record_size)
            done = time.monotonic()
            while metric(b.metrics_url, "weir_remote_upload_lag_bytes", "tiered") > 0:
                time.sleep(0.1)
            results["upload_drained_s"] = time.monotonic() - done
            stop.set()
            t.join()
            results["upload_lag_max_mb"] = lag_max[0] / 1e6
            results["uploaded_mb"] = metric(b.metrics_url, "weir_remote_uploaded_bytes_total", "tiered") / 1e6
            time.sleep(2)  # a retention pass deletes the uploaded local copies
            ddir = b.dir / "data"
            results["local_disk_mb"] = {t: closed_bytes(ddir / f"{t}-0") / 1e6 for t in ("local", "tiered")}
            for topic in ("local", "tiered"):
                drop_caches()
                mb_s, cpu_gb, nbytes = catchup(b.bootstrap, topic, b.proc.pid, n)
                results[f"catchup_{topic}_mb_s"] = mb_s
                results[f"catchup_{topic}_cpu_s_per_gb"] = cpu_gb
            results["remote_read_mb"] = metric(b.metrics_url, "weir_remote_read_bytes_total", "tiered") / 1e6
            objects = [(k, s) for k, s in s3.list_objects(BUCKET, "tiered-0/") if k.endswith(".log")]
            drop_caches()
            results["raw_get_mb_s"], _ = raw_gets(s3, objects)
        finally:
            b.stop()
    results["ratio_tiered_to_local"] = results["catchup_tiered_mb_s"] / results["catchup_local_mb_s"]
    results["ratio_tiered_to_raw_get"] = results["catchup_tiered_mb_s"] / results["raw_get_mb_s"]
    (a.out / "tiered.json").write_text(json.dumps(results, indent=2))
    for k, v in results.items():
        print(f"{k:32} {v if not isinstance(v, float) else round(v, 3)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
