"""DeleteRecords on a partition replicated across three brokers (docs/replication.md,
"DeleteRecords on replicated partitions"; issue 19).

What broke before: DeleteRecords on a partition of replication factor above 1 was refused
(POLICY_VIOLATION), so a user could not trim a replicated topic as Kafka lets them
(`kafka-delete-records`, AdminClient.delete_records), and the test's first call fails.

The log start move is a Raft entry, so every replica drops the same records:
- a librdkafka admin's DeleteRecords at an offset inside a segment answers that offset as the
  low watermark; every replica's `log_start_offset` file names it and its segments wholly
  below it are gone; a consumer from the beginning reads exactly the records from there;
- the leader's broker is killed -9: the new leader's ListOffsets EARLIEST is still that offset
  (a deletion only the old leader knew would come back here);
- a follower is killed -9, a second DeleteRecords is committed by the two others, and the
  follower, restarted, applies it from the Raft log as it catches up (its own log start moves
  too), and the whole cluster then serves the same records from the second low watermark.
"""

from __future__ import annotations

import struct

import pytest
from confluent_kafka import TopicPartition

from clients import CLIENT_TIMEOUT_S, rd_admin, rd_consume, rd_producer
from test_cluster_metadata import NODE_ID_STRIDE, cluster, create, wait_until  # noqa: F401
from test_cluster_replication import leader_of, produce, values
from test_cluster_retention import log_start

TOPIC = "trimmed"
SEGMENT = 64 << 10
PAD = 1 << 10
N = 400  # ~440 KB: several 64 KiB segments
FIRST = 137  # inside a batch of a segment past the first
SECOND = 333
SMALL_BATCHES = {"linger.ms": 5, "batch.size": 8 << 10, "enable.idempotence": True}


def delete_below(bootstrap: str, offset: int) -> int:
    admin = rd_admin(bootstrap)
    [f] = admin.delete_records([TopicPartition(TOPIC, 0, offset)], request_timeout=CLIENT_TIMEOUT_S).values()
    return f.result().low_watermark


def stored_log_start(b) -> int:
    """The replica's log start as its `log_start_offset` file records it (storage's markers:
    magic WEIRLSO1, the offset, a CRC); 0 when the file is not there."""
    path = b.data_dir / f"{TOPIC}-0" / "log_start_offset"
    if not path.exists():
        return 0
    data = path.read_bytes()
    assert data[:8] == b"WEIRLSO1", data[:8]
    return struct.unpack_from(">Q", data, 8)[0]


def segment_bases(b) -> list[int]:
    return sorted(int(p.stem) for p in (b.data_dir / f"{TOPIC}-0").glob("*.log"))


def reads_from(bootstrap: str, low: int, end: int) -> None:
    got = rd_consume(bootstrap, TOPIC, [0], end - low)
    assert [r.offset for r in got] == list(range(low, end))
    assert [r.value for r in got] == values(0, low, end, PAD)


@pytest.mark.timeout(180)
def test_delete_records_moves_every_replicas_log_start(cluster):
    everyone = ",".join(b.bootstrap for b in cluster)
    create(cluster[0].bootstrap, TOPIC, 1, replication_factor=3, config={"segment.bytes": str(SEGMENT)})
    leader, epoch = leader_of(cluster, TOPIC, 0)
    produce(rd_producer(everyone, acks="all", **SMALL_BATCHES), TOPIC, 0, 0, N, pad=PAD)

    # DeleteRecords inside a segment: the low watermark is exactly the offset asked for.
    assert delete_below(everyone, FIRST) == FIRST
    assert log_start(everyone, TOPIC) == FIRST
    wait_until(f"every replica's log start at {FIRST}",
               lambda: all(stored_log_start(b) == FIRST for b in cluster), timeout=20.0)
    for b in cluster:
        bases = segment_bases(b)
        assert len(bases) > 1 and bases[0] <= FIRST < bases[1], (b.data_dir, bases)
        assert bases[0] > 0, f"{b.data_dir}: the segments wholly below {FIRST} are deleted: {bases}"
    reads_from(everyone, FIRST, N)

    # The leader dies: the new one starts its log where the deletion left it.
    dead = cluster[leader // NODE_ID_STRIDE - 1]
    survivors = [b for b in cluster if b is not dead]
    dead._kill()
    leader, epoch = leader_of(survivors, TOPIC, 0, epoch + 1)
    live = ",".join(b.bootstrap for b in survivors)
    assert log_start(live, TOPIC) == FIRST
    reads_from(live, FIRST, N)
    dead.start()
    leader, epoch = leader_of(cluster, TOPIC, 0, epoch)

    # A follower down while the next deletion commits applies it when it catches up.
    follower = next(b for b in cluster if b is not cluster[leader // NODE_ID_STRIDE - 1])
    follower._kill()
    others = [b for b in cluster if b is not follower]
    assert delete_below(",".join(b.bootstrap for b in others), SECOND) == SECOND
    assert stored_log_start(follower) == FIRST
    follower.start()
    wait_until(f"the restarted follower's log start at {SECOND}",
               lambda: stored_log_start(follower) == SECOND, timeout=30.0)
    assert all(stored_log_start(b) == SECOND for b in cluster)
    everyone = ",".join(b.bootstrap for b in cluster)
    assert log_start(everyone, TOPIC) == SECOND
    reads_from(everyone, SECOND, N)
    # An offset past the high watermark is refused, and changes nothing.
    admin = rd_admin(everyone)
    [f] = admin.delete_records([TopicPartition(TOPIC, 0, N + 5)], request_timeout=CLIENT_TIMEOUT_S).values()
    with pytest.raises(Exception, match="OFFSET_OUT_OF_RANGE|out of range"):
        f.result()
    assert log_start(everyone, TOPIC) == SECOND
    print(f"log start {FIRST} then {SECOND} on every replica; segments {[segment_bases(b) for b in cluster]}")
