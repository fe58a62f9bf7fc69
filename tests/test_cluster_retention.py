"""Retention on replicated partitions (docs/replication.md, "Retention on replicated
partitions"): each replica deletes its old segments on its own, once its Raft snapshot point
has moved past them, and a replica restarted after that opens its Raft log from the point.

Three `weir serve` processes; a topic at replication factor 3 with 64 KiB segments and
`retention.bytes` of 256 KiB. A librdkafka acks=all producer writes about 5 MB in batches of
16 KiB (a follower appends what one Raft message brings, up to 1 MiB, in one go, and rolls
only between appends, so its segments can hold up to that); then every
replica must have deleted its first segments while keeping at least `retention.bytes`; a
consumer from the beginning starts at the leader's new log start and reads every record from
there to the end. A follower is killed and restarted, then the leader is: the cluster elects a
leader among replicas whose logs were compacted, producing goes on, and every replica holds the
same batches above the highest log start.
"""

from __future__ import annotations

import struct
import time

import pytest
from confluent_kafka import TopicPartition

from clients import CLIENT_TIMEOUT_S, rd_consume, rd_consumer, rd_producer
from test_cluster_metadata import NODE_ID_STRIDE, cluster, create, wait_until  # noqa: F401
from test_cluster_replication import count_records, leader_of, produce, stored_batches, values

TOPIC = "kept"
SEGMENT = 64 << 10
RETAIN = 256 << 10
PAD = 4 << 10
N = 1200
SMALL_BATCHES = {"linger.ms": 5, "batch.size": 16 << 10}


def first_segment(b) -> int:
    return min(int(p.stem) for p in (b.data_dir / f"{TOPIC}-0").glob("*.log"))


def kept_bytes(b) -> int:
    """The bytes of partition 0's segment files on broker `b` (a file retention deletes while
    they are summed is not kept)."""
    total = 0
    for p in (b.data_dir / f"{TOPIC}-0").glob("*.log"):
        try:
            total += p.stat().st_size
        except FileNotFoundError:
            pass
    return total


def batches_from(data: bytes, offset: int) -> bytes:
    """The batches of `data` (stored_batches' concatenation) whose base offset is `offset` or
    more."""
    pos = 0
    while pos < len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        if base >= offset:
            return data[pos:]
        pos += 12 + length
    return b""


def log_start(bootstrap: str, topic: str = TOPIC) -> int:
    """Partition 0's log start, as ListOffsets EARLIEST answers it."""
    c = rd_consumer(bootstrap)
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=CLIENT_TIMEOUT_S, cached=False)[0]
    finally:
        c.close()


def settled_log_start(bootstrap: str) -> int:
    """The leader's log start once it has stopped moving. Retention goes on while entries are
    applied (a replica moves its snapshot point, then deletes below it), so a start read once
    can be deleted before a consumer reaches it; a consumer then starts later (CI saw 70 of
    310 records after a leader change)."""
    def settled():
        first = log_start(bootstrap)
        time.sleep(1.0)
        return first if first == log_start(bootstrap) and first > 0 else None
    return wait_until("the leader's log start settled", settled, timeout=30.0)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("cluster", [{"log.retention.check.interval.ms": "200"}], indirect=True)
def test_each_replica_applies_retention_and_restarts_from_its_snapshot_point(cluster):
    everyone = ",".join(b.bootstrap for b in cluster)
    create(cluster[0].bootstrap, TOPIC, 1, replication_factor=3,
           config={"segment.bytes": str(SEGMENT), "retention.bytes": str(RETAIN)})
    leader, epoch = leader_of(cluster, TOPIC, 0)
    producer = rd_producer(everyone, acks="all", **SMALL_BATCHES)
    produce(producer, TOPIC, 0, 0, N, pad=PAD)

    # Every replica deletes its first segments on its own, and keeps at least retention.bytes.
    # A replica deletes several segments in one pass and logs once the pass is done, so the
    # wait is for the log line too: a look between two deletions sees files gone, no line yet.
    def retained():
        if all(first_segment(b) > 0 and "retention deleted segments" in b.log_tail(1 << 20) for b in cluster):
            return [first_segment(b) for b in cluster]
        return None
    starts = wait_until("retention on every replica", retained, timeout=30.0)
    for b in cluster:
        assert kept_bytes(b) >= RETAIN, (b.data_dir, kept_bytes(b))
    low = settled_log_start(everyone)
    got = rd_consume(everyone, TOPIC, [0], N - low)
    assert [r.offset for r in got] == list(range(low, N))
    assert [r.value for r in got] == values(0, low, N, PAD)

    # A follower restarted after retention opens its Raft log from its snapshot point.
    follower = cluster[(leader // NODE_ID_STRIDE) % 3]  # broker ids are 1-3, at index id - 1
    follower._kill()
    follower.start()
    producer = rd_producer(",".join(b.bootstrap for b in cluster), acks="all", **SMALL_BATCHES)
    produce(producer, TOPIC, 0, N, N + 50, pad=PAD)

    # The leader's broker dies: a replica whose log was compacted leads, producing goes on.
    dead = cluster[leader // NODE_ID_STRIDE - 1]
    survivors = [b for b in cluster if b is not dead]
    dead._kill()
    leader_of(survivors, TOPIC, 0, epoch + 1)
    producer = rd_producer(",".join(b.bootstrap for b in survivors), acks="all", **SMALL_BATCHES)
    produce(producer, TOPIC, 0, N + 50, N + 100, pad=PAD)
    dead.start()

    # Every replica holds the same batches above the highest first segment.
    def same():
        above = max(first_segment(b) for b in cluster)
        copies = [batches_from(stored_batches(b.data_dir, TOPIC, 0), above) for b in cluster]
        if all(c == copies[0] for c in copies) and count_records(copies[0]) == N + 100 - above:
            return above
        return None
    above = wait_until("the same batches above every replica's log start", same, timeout=60.0)
    everyone = ",".join(b.bootstrap for b in cluster)
    low = settled_log_start(everyone)
    got = rd_consume(everyone, TOPIC, [0], N + 100 - low)
    assert [r.value for r in got] == values(0, low, N + 100, PAD)
    print(f"first segments after retention: {starts}; log start {low}; replicas agree from {above}")
