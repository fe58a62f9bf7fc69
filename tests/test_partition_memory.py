"""Broker memory and disk with many partitions stay within the documented bound (docs/bench.md).

What broke: every partition's log fallocated 64 MiB on open, so 2,000 partitions asked for
125 GiB of disk (the broker ran the disk out of space while creating them), and every
partition that received a message kept a 1 MiB write buffer forever. Now a segment reserves
one write chunk and grows in steps, and idle partitions release their write buffers at the
retention check.

2,000 partitions (two topics), one message each with confluent-kafka; the broker's RSS
growth per partition must stay under the bound at its peak and, once the partitions are
idle, under the idle bound. 10,000 partitions: benches/rss_partitions.py.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

PARTITIONS = 2000
PEAK_BOUND_KIB = 32  # documented in docs/bench.md; measured ~13 KiB
IDLE_BOUND_KIB = 16  # measured ~5 KiB
CHECK_MS = 1000


def vm(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(rest.split()[0]) * 1024
    return out


def allocated_bytes(root: Path) -> int:
    return sum(p.stat().st_blocks * 512 for p in root.rglob("*.log"))


@pytest.mark.timeout(300)
def test_rss_and_disk_per_partition_stay_bounded(broker_factory):
    broker = broker_factory(settings={"log.retention.check.interval.ms": CHECK_MS})
    time.sleep(0.5)
    base = vm(broker.pid)["VmRSS"]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topics = [("mem-a", PARTITIONS // 2), ("mem-b", PARTITIONS - PARTITIONS // 2)]
    for f in admin.create_topics([NewTopic(t, n, 1) for t, n in topics], operation_timeout=120).values():
        f.result(timeout=200)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50})
    errors = []
    for t, n in topics:
        for p in range(n):
            producer.produce(t, value=b"x" * 100, partition=p,
                             on_delivery=lambda e, m: errors.append(e) if e else None)
            producer.poll(0)
    assert producer.flush(120) == 0 and not errors, errors[:3]
    time.sleep(2.5 * CHECK_MS / 1000 + 1)  # two retention checks: idle buffers released
    now = vm(broker.pid)
    peak_kib = (now["VmHWM"] - base) / PARTITIONS / 1024
    idle_kib = (now["VmRSS"] - base) / PARTITIONS / 1024
    assert peak_kib < PEAK_BOUND_KIB, f"peak RSS growth {peak_kib:.1f} KiB per partition"
    assert idle_kib < IDLE_BOUND_KIB, f"idle RSS growth {idle_kib:.1f} KiB per partition"
    disk = allocated_bytes(broker.data_dir) / PARTITIONS
    assert disk <= 2 << 20, f"{disk / 2**20:.1f} MiB of disk reserved per partition"
