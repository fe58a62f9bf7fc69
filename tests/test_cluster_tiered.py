"""Tiered storage on a partition replicated across three brokers (issue 41,
docs/tiered-storage.md "Replicated partitions"), against a real S3 server (versitygw,
tests/s3_support.py).

What broke before: `remote.storage.enable=true` was refused on a cluster (INVALID_CONFIG), so a
replicated topic could keep only what one machine's disk holds.

What a user would notice, and what is checked:
- only the leader uploads: every object's upload id carries one leader epoch, each object is
  in the store once, and every replica lists exactly the same segments (the list travels in
  the Raft log) — the bucket holds exactly what they list;
- every replica keeps only `local.retention.bytes` locally once segments are uploaded, while a
  consumer reads the topic from offset 0, every record once and in order;
- the leader's broker killed -9: the new leader continues the uploads where the old one
  stopped (objects of a newer epoch after the old ones, none uploaded twice), the consumer
  still reads everything from 0, and the killed broker, restarted behind the new leader's
  local log start, installs its snapshot — with the remote segment list — and lists the same
  segments as the others;
- that broker, made the leader (it is the preferred replica), knows what a replica holding the
  whole log would: the idempotent producer that wrote only below its snapshot point, with its
  last sequence (DescribeProducers), and where the first leader's epoch ended
  (OffsetForLeaderEpoch) — taken from the remote segment ending at the point (its `.snapshot`
  and `.epochs` objects), as a Kafka follower builds its auxiliary state from the remote tier;
- the whole log's `retention.bytes` deletes remote segments on every replica and in the store.
"""

from __future__ import annotations

import struct

import confluent_kafka
import kafka
import pytest
from confluent_kafka import ElectionType, TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from clients import CLIENT_TIMEOUT_S, assert_exact, rd_admin, rd_consume, rd_producer, rd_produce
from test_cluster_epochs import epoch_end
from test_cluster_metadata import NODE_ID_STRIDE, create, three_brokers, wait_until
from test_cluster_replication import leader_of
from test_tiered_storage import (BUCKET, OBJECTS, TOPIC, list_offset, manifest_keys,  # noqa: F401
                                 messages, s3, sealed_segment_sizes, tiered_settings)

SEGMENT = 64 << 10
LOCAL = 128 << 10
N = 3_000  # ~650 KB of 200-byte records: ten segments


@pytest.fixture
def tiered_cluster(request, s3):
    yield from three_brokers(request, tiered_settings(s3))


def bucket_keys(s3) -> list[str]:
    return sorted(k for k, _ in s3.list_objects(BUCKET, f"{TOPIC}-0/"))


def epochs(keys: list[str]) -> set[int]:
    """The leader epochs in the objects' upload ids (`<base>-<id, 16 hex>.<ext>`, the epoch in
    the id's high 32 bits)."""
    return {int(k.rsplit("-", 1)[1].split(".")[0], 16) >> 32 for k in keys}


def settled(s3, brokers) -> list[str] | None:
    """The keys every replica lists, once the partition's leader uploaded every closed segment
    (its latest tiered offset is at least just below its active segment: a leader that took
    over cut its segments elsewhere, and its active one may hold the remote end), all list the
    same and the bucket holds exactly those (no upload in flight, no orphan)."""
    lead = leading(brokers)
    if lead is None or list_offset(lead.bootstrap, -5) + 1 < local_bases(lead)[-1]:
        return None
    lists = [manifest_keys(b.data_dir) for b in brokers]
    if any(keys != lists[0] for keys in lists) or bucket_keys(s3) != lists[0]:
        return None
    return lists[0] or None


def leading(brokers):
    """The broker that answers ListOffsets of partition 0 (its leader), if one does."""
    for b in brokers:
        try:
            list_offset(b.bootstrap, -5)
            return b
        except (AssertionError, OSError):
            continue
    return None


def covered(b) -> tuple[int, int]:
    """The offsets the replica's remote segments cover, [first base, last end), after
    checking they leave no hole (a segment may begin inside the one before it: replicas cut
    their segments at different offsets)."""
    raw = (b.data_dir / f"{TOPIC}-0" / "remote_segments").read_bytes()
    (count,) = struct.unpack_from(">I", raw, 16)
    ranges = [struct.unpack_from(">QQ", raw, 20 + 44 * i) for i in range(count)]
    for (_, end), (base, nxt) in zip(ranges, ranges[1:]):
        assert base <= end < nxt, f"{b.data_dir}: a hole or a step back in {ranges}"
    return ranges[0][0], ranges[-1][1]


def producers(bootstrap: str) -> dict[int, int]:
    """{producer id: last sequence} of partition 0, as its leader answers DescribeProducers."""
    admin = kafka.KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=int(CLIENT_TIMEOUT_S * 1000))
    try:
        tp = kafka.TopicPartition(TOPIC, 0)
        return {p.producer_id: p.last_sequence for p in admin.describe_producers([tp])[tp].active_producers}
    except kafka.errors.KafkaError as e:  # e.g. NOT_LEADER while metadata catches up
        raise AssertionError(f"DescribeProducers: {e!r}") from e
    finally:
        admin.close()


def local_bases(b) -> list[int]:
    return sorted(int(p.stem) for p in (b.data_dir / f"{TOPIC}-0").glob("*.log"))


@pytest.mark.timeout(300)
def test_a_replicated_topic_is_tiered_by_its_leader_and_survives_a_leader_kill(tiered_cluster, s3):
    cluster = tiered_cluster
    everyone = ",".join(b.bootstrap for b in cluster)
    create(cluster[0].bootstrap, TOPIC, 1, replication_factor=3,
           config={"remote.storage.enable": "true", "segment.bytes": str(SEGMENT),
                   "local.retention.bytes": str(LOCAL)})
    leader, epoch = leader_of(cluster, TOPIC, 0)
    lead = cluster[leader // NODE_ID_STRIDE - 1]
    small_batches = {"linger.ms": 5, "batch.size": 8 << 10, "enable.idempotence": True}
    sent = messages(N)
    rd_produce(rd_producer(everyone, acks="all", **small_batches), TOPIC, sent)

    wait_until("the leader's local log start to move", lambda: list_offset(lead.bootstrap, -4) > 0, timeout=60)
    keys = wait_until("every replica to list the same uploads, and the bucket to hold them",
                      lambda: settled(s3, cluster), timeout=60)
    assert len(keys) >= len(OBJECTS) * 5, keys
    assert len(epochs(keys)) == 1, f"more than one uploader: {keys}"
    assert list_offset(lead.bootstrap, -2) == 0, "the log still starts at 0"
    # Each replica deletes locally only what is uploaded, down to local.retention.bytes.
    for b in cluster:
        wait_until(f"{b.data_dir}: local segments within local.retention.bytes",
                   lambda: local_bases(b)[0] > 0 and sum(sealed_segment_sizes(b.data_dir)[1:]) < LOCAL,
                   timeout=30)
    got = rd_consume(everyone, TOPIC, [0], N, offset=confluent_kafka.OFFSET_BEGINNING)
    assert_exact(sent, got)
    [(first_producer, first_last_seq)] = producers(everyone).items()
    assert first_last_seq == N - 1
    first_epoch = epoch

    # The leader's broker dies; the new leader goes on uploading where it stopped.
    tiered_before = list_offset(lead.bootstrap, -5)
    dead = lead
    survivors = [b for b in cluster if b is not dead]
    dead._kill()
    leader, epoch = leader_of(survivors, TOPIC, 0, epoch + 1)
    lead = cluster[leader // NODE_ID_STRIDE - 1]
    more = messages(N, start=N)
    rd_produce(rd_producer(",".join(b.bootstrap for b in survivors), acks="all", **small_batches), TOPIC, more)
    sent += more
    wait_until("uploads past the old leader's", lambda: list_offset(lead.bootstrap, -5) > N + N // 2, timeout=60)
    after = wait_until("the two live replicas to list the same uploads, and the bucket to hold them",
                       lambda: settled(s3, survivors), timeout=60)
    new = sorted(set(after) - set(keys))
    assert new and min(epochs(new)) > max(epochs(keys)), f"uploaded by an old epoch after the failover: {new}"
    # The new leader's segments may be cut elsewhere than the old one's: its first upload may
    # begin inside the last one listed, or replace the ones listed inside it — never leave a
    # hole, and never drop an object that still serves an offset nobody else does.
    gone = sorted(set(keys) - set(after))
    assert len(gone) <= len(OBJECTS) * 2, f"more replaced than a failover explains: {gone}"
    for b in survivors:
        assert covered(b) == (0, list_offset(lead.bootstrap, -5) + 1)
    assert tiered_before < list_offset(lead.bootstrap, -5)
    got = rd_consume(",".join(b.bootstrap for b in survivors), TOPIC, [0], 2 * N,
                     offset=confluent_kafka.OFFSET_BEGINNING)
    assert_exact(sent, got)

    # The killed broker is far behind the new leader's local log start: it installs a snapshot
    # carrying the remote segment list, then applies the uploads after it like the others.
    dead.start()
    wait_until("the restarted broker to list the same uploads as the others",
               lambda: settled(s3, cluster), timeout=60)
    assert b"installing a Raft snapshot" in dead.log_path.read_bytes(), "no snapshot installed"
    wait_until("the restarted broker to take the producer state and epochs from the remote tier",
               lambda: b"restored the producer state and leader epochs" in dead.log_path.read_bytes(),
               timeout=30)

    # Leading the partition, it knows the first producer, which wrote only below its snapshot
    # point, and where the first leader's epoch ended: as a replica holding the whole log.
    admin = rd_admin(everyone)

    def elected():
        f = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(TOPIC, 0)])
        try:
            f.result(CLIENT_TIMEOUT_S)
        except confluent_kafka.KafkaException:
            pass  # not in sync yet, or elected already: the metadata says which
        leader, _ = leader_of(cluster, TOPIC, 0, epoch)
        return cluster[leader // NODE_ID_STRIDE - 1] is dead
    wait_until("the restarted broker, the preferred replica, to lead", elected, timeout=60)
    leader, epoch = leader_of(cluster, TOPIC, 0, epoch + 1)
    assert list_offset(dead.bootstrap, -4) > N, "the first producer's records are all below its log"
    known = wait_until("the new leader to answer DescribeProducers with both producers",
                       lambda: (p := producers(everyone)) and len(p) == 2 and p, timeout=30)
    assert known[first_producer] == first_last_seq, known
    assert epoch_end(dead, TOPIC, first_epoch, epoch) == (0, first_epoch, N)

    # The whole log's retention.bytes deletes remote segments, on every replica and in the store.
    res = ConfigResource(ResourceType.TOPIC, TOPIC, incremental_configs=[
        ConfigEntry("retention.bytes", str(4 * SEGMENT), incremental_operation=AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([res], request_timeout=CLIENT_TIMEOUT_S).values():
        f.result(CLIENT_TIMEOUT_S)
    # (The restarted broker, the preferred leader, may take the leadership back meanwhile.)
    start = wait_until("remote retention to move the log start",
                       lambda: (b := leading(cluster)) and list_offset(b.bootstrap, -2), timeout=60)
    trimmed = wait_until("every replica and the bucket to drop the same remote segments",
                         lambda: (k := settled(s3, cluster)) and not set(after) <= set(k) and k, timeout=60)
    assert len(trimmed) < len(after)
    got = rd_consume(everyone, TOPIC, [0], 2 * N - start, offset=confluent_kafka.OFFSET_BEGINNING)
    assert_exact(sent[start:], got, {0: start})
    for b in cluster:
        b.check_alive()
    print(f"uploads: {len(keys) // len(OBJECTS)} by the first leader, {len(new) // len(OBJECTS)} by the "
          f"second, {len(gone) // len(OBJECTS)} replaced at the failover; remote retention moved the log "
          f"start to {start}")

