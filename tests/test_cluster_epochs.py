"""Leader epochs on the wire (KIP-320; docs/replication.md, "Leader epochs on the wire").

A replicated partition's leader epoch is its Raft term: Metadata names it, the leader stamps it
into every batch it appends, and every replica keeps where each epoch starts. After a leader
change a Kafka consumer checks its position with OffsetForLeaderEpoch: it asks the new leader
where the epoch of the last batch it read ends, and a position past that end means the log it
read from was cut. librdkafka and kafka-python both do this once the broker lists the API;
before, weir did not, so they skipped the check.

What a user would notice if this went wrong, and what these tests check:
- a wrong end offset sends a consumer back to it (duplicates), and an unknown epoch resets it
  per `auto.offset.reset` (duplicates or skipped records): the consumers here read across a
  kill -9 of the leader and must see every record exactly once, in order, having validated
  (the broker counts the OffsetForLeaderEpoch requests it answered);
- a client whose leader epoch is stale must be told so (FENCED_LEADER_EPOCH) and not be served
  as if its metadata were current; one ahead of the broker gets UNKNOWN_LEADER_EPOCH; both
  refresh their metadata and retry.
"""

from __future__ import annotations

import re
import urllib.request

import pytest

import kafka_wire as kw
import kafka
from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from clients import kp_consumer, kp_poll, rd_consumer, rd_poll, rd_producer
from test_cluster_metadata import NODE_ID_STRIDE, cluster, create, wait_until  # noqa: F401
from test_cluster_replication import leader_of, produce, values


def broker_of(brokers, node: int):
    return brokers[node // NODE_ID_STRIDE - 1]


def epoch_end(broker, topic: str, epoch: int, current: int) -> tuple[int, int, int]:
    """(error, epoch, end offset) of OffsetForLeaderEpoch v2 for partition 0, on `broker`."""
    with kw.connect(broker.bootstrap) as s:
        s.sendall(kw.offset_for_leader_epoch_v2(1, topic, 0, epoch, current))
        _, body = kw.read_response(s)
    return kw.parse_offset_for_leader_epoch_v2(body)


def list_offset(broker, topic: str, timestamp: int, current: int) -> tuple[int, int, int]:
    """(error, offset, leader epoch) of ListOffsets v4 for partition 0, on `broker`."""
    with kw.connect(broker.bootstrap) as s:
        s.sendall(kw.list_offsets_v4(1, topic, 0, timestamp, current))
        _, body = kw.read_response(s)
    return kw.parse_list_offsets_v4(body)


def epoch_requests(brokers) -> int:
    """OffsetForLeaderEpoch requests the brokers answered, summed over their cores."""
    total = 0
    for b in brokers:
        with urllib.request.urlopen(b.metrics_url, timeout=10) as r:
            text = r.read().decode()
        total += sum(int(float(v)) for v in re.findall(
            r'^weir_requests_total\{[^}]*api="OffsetForLeaderEpoch"[^}]*\} (\S+)$', text, re.M))
    return total


@pytest.mark.timeout(240)
def test_offset_for_leader_epoch_names_where_each_leaders_records_end(cluster):
    topic = "epochs"
    create(cluster[0].bootstrap, topic, 1, replication_factor=3)
    leader, epoch = leader_of(cluster, topic, 0)
    everyone = ",".join(b.bootstrap for b in cluster)
    producer = rd_producer(everyone, acks="all")
    produce(producer, topic, 0, 0, 30)
    # (epoch, first offset, end offset) of the records each leader appended.
    written = [(epoch, 0, 30)]
    # Two leader changes by kill -9; the killed broker comes back each time.
    for lo, hi in ((30, 60), (60, 90)):
        dead = broker_of(cluster, leader)
        dead._kill()
        survivors = [b for b in cluster if b is not dead]
        leader, epoch = leader_of(survivors, topic, 0, epoch + 1)
        produce(producer, topic, 0, lo, hi)
        written.append((epoch, lo, hi))
        dead.start()
    producer.flush(5)
    leader, current = leader_of(cluster, topic, 0, epoch)
    print(f"records by epoch (epoch, from, to): {written}; current leader epoch {current}")
    assert len({e for e, _, _ in written}) == 3, written
    here = broker_of(cluster, leader)

    for e, _lo, hi in written:
        assert epoch_end(here, topic, e, current) == (0, e, hi), f"epoch {e}"
    # An epoch before the first one the log holds ends where that one starts (Kafka's answer);
    # one above the current epoch is unknown (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET).
    first = written[0][0]
    assert epoch_end(here, topic, first - 1, current) == (0, first - 1, 0)
    assert epoch_end(here, topic, current + 1, current) == (0, -1, -1)
    # No current epoch named (-1): answered all the same.
    assert epoch_end(here, topic, written[1][0], -1) == (0, written[1][0], 60)
    # Fencing: a stale current epoch, a future one, and a follower asked.
    assert epoch_end(here, topic, first, first)[0] == kw.ERROR_FENCED_LEADER_EPOCH
    assert epoch_end(here, topic, first, current + 1)[0] == kw.ERROR_UNKNOWN_LEADER_EPOCH
    for b in cluster:
        if b is not here:
            assert epoch_end(b, topic, first, current)[0] == kw.ERROR_NOT_LEADER_OR_FOLLOWER
            assert epoch_end(b, topic, first, first)[0] == kw.ERROR_FENCED_LEADER_EPOCH

    # ListOffsets names the epoch of the batch at the offset it returns (a consumer's position
    # there carries it), and fences a stale current epoch the same way.
    assert list_offset(here, topic, -1, current) == (0, 90, current)
    assert list_offset(here, topic, -2, current) == (0, 0, first)
    assert list_offset(here, topic, -1, first)[0] == kw.ERROR_FENCED_LEADER_EPOCH
    assert list_offset(here, topic, -1, current + 1)[0] == kw.ERROR_UNKNOWN_LEADER_EPOCH


@pytest.mark.timeout(240)
def test_consumers_validate_their_position_across_a_leader_kill(cluster):
    """librdkafka, then kafka-python (one at a time, so that the broker's count of
    OffsetForLeaderEpoch requests tells them apart), each reading across a kill -9 of the
    partition's leader."""
    topic = "validated"
    create(cluster[0].bootstrap, topic, 1, replication_factor=3)
    leader, epoch = leader_of(cluster, topic, 0)
    everyone = ",".join(b.bootstrap for b in cluster)
    producer = rd_producer(everyone, acks="all")
    produce(producer, topic, 0, 0, 40)

    def kill_leader_and_produce(lo: int, hi: int) -> int:
        """Kills the leader, waits for the next, produces [lo, hi) through it, restarts the
        killed broker; the OffsetForLeaderEpoch requests the others had answered before the
        kill (the clients check their position in the background, as soon as they hear of
        the new leader)."""
        nonlocal leader, epoch
        dead = broker_of(cluster, leader)
        survivors = [b for b in cluster if b is not dead]
        count = epoch_requests(survivors)
        dead._kill()
        leader, epoch = leader_of(survivors, topic, 0, epoch + 1)
        produce(producer, topic, 0, lo, hi)
        dead.start()
        return count

    # Both consumers reset to the beginning on any doubt (`earliest`): a truncation wrongly
    # found would show as records read twice.
    rd = rd_consumer(everyone, **{"auto.offset.reset": "earliest",
                                  "topic.metadata.refresh.interval.ms": 1000})
    rd.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got = rd_poll(rd, 40)
    before = kill_leader_and_produce(40, 80)
    got += rd_poll(rd, 40)
    assert rd.poll(1.0) is None, "librdkafka: no record twice"
    rd.close()
    checked = epoch_requests(cluster) - before
    print(f"librdkafka: OffsetForLeaderEpoch requests after the kill: {checked} (epoch {epoch})")
    assert [r.offset for r in got] == list(range(80)), "librdkafka read each offset once, in order"
    assert [r.value for r in got] == values(0, 0, 80)
    assert checked > 0, "librdkafka did not check its position with the new leader"

    kp = kp_consumer(everyone, auto_offset_reset="earliest", metadata_max_age_ms=1000)
    tp = kafka.TopicPartition(topic, 0)
    kp.assign([tp])
    kp.seek_to_beginning(tp)
    got = kp_poll(kp, 80)
    before = kill_leader_and_produce(80, 120)
    got += kp_poll(kp, 40)
    assert not any(kp.poll(timeout_ms=1000).values()), "kafka-python: no record twice"
    kp.close()
    checked = epoch_requests(cluster) - before
    print(f"kafka-python: OffsetForLeaderEpoch requests after the kill: {checked} (epoch {epoch})")
    assert [r.offset for r in got] == list(range(120)), "kafka-python read each offset once, in order"
    assert [r.value for r in got] == values(0, 0, 120)
    assert checked > 0, "kafka-python did not check its position with the new leader"
    producer.flush(5)
