"""ListOffsets: earliest, latest and by timestamp, as both clients ask for them.

Kafka's answer to "offset for time T" is the first record whose timestamp is >= T — the exact
record, also when it sits in the middle of a multi-record batch — or "none" (-1) when every
record is older than T.
"""

from __future__ import annotations

import kafka
import pytest
from confluent_kafka import TopicPartition

from clients import Msg, kp_consumer, rd_consumer, rd_create_topic, rd_produce, rd_producer

T0 = 1_700_000_000_000
N = 10


def timestamps():
    return [T0 + i * 1000 for i in range(N)]


@pytest.fixture
def timed_topic(broker, topic_name):
    """Partition 0: ten records, one batch each. Partition 1: the same ten records in one batch.
    Partition 2: empty. Record i has timestamp T0 + i s."""
    rd_create_topic(broker.bootstrap, topic_name, 3)
    one_by_one = rd_producer(broker.bootstrap, acks="all")
    for i, ts in enumerate(timestamps()):
        rd_produce(one_by_one, topic_name, [Msg(None, f"v{i}".encode(), (), ts, 0)])
    rd_produce(rd_producer(broker.bootstrap, acks="all", **{"linger.ms": 200}), topic_name,
               [Msg(None, f"v{i}".encode(), (), ts, 1) for i, ts in enumerate(timestamps())])
    return topic_name


# (target timestamp, expected offset; -1 = no record that recent)
CASES = [(T0 - 5000, 0), (T0, 0), (T0 + 1, 1), (T0 + 3500, 4), (T0 + 4000, 4), (T0 + 9000, 9),
         (T0 + 9001, -1)]


@pytest.mark.parametrize("partition", [0, 1], ids=["batch-per-record", "one-batch"])
def test_librdkafka_watermarks_and_offsets_for_times(broker, timed_topic, partition):
    c = rd_consumer(broker.bootstrap)
    try:
        assert c.get_watermark_offsets(TopicPartition(timed_topic, partition), timeout=10, cached=False) == (0, N)
        assert c.get_watermark_offsets(TopicPartition(timed_topic, 2), timeout=10, cached=False) == (0, 0)
        for target, want in CASES:
            [tp] = c.offsets_for_times([TopicPartition(timed_topic, partition, target)], timeout=10)
            assert tp.error is None, f"offsets_for_times({target - T0:+d} ms): {tp.error}"
            assert tp.offset == want, f"offset for time T0{target - T0:+d} ms: got {tp.offset}, want {want}"
        [tp] = c.offsets_for_times([TopicPartition(timed_topic, 2, T0)], timeout=10)
        assert tp.offset == -1, "an empty partition has no offset for any time"
    finally:
        c.close()


@pytest.mark.parametrize("partition", [0, 1], ids=["batch-per-record", "one-batch"])
def test_kafka_python_beginning_end_and_offsets_for_times(broker, timed_topic, partition):
    c = kp_consumer(broker.bootstrap)
    try:
        tp = kafka.TopicPartition(timed_topic, partition)
        empty = kafka.TopicPartition(timed_topic, 2)
        assert c.beginning_offsets([tp, empty]) == {tp: 0, empty: 0}
        assert c.end_offsets([tp, empty]) == {tp: N, empty: 0}
        for target, want in CASES:
            got = c.offsets_for_times({tp: target})[tp]
            if want == -1:
                assert got is None, f"offset for time T0{target - T0:+d} ms: got {got}, want none"
            else:
                assert got is not None and got.offset == want, f"offset for time T0{target - T0:+d} ms: got {got}, want {want}"
                assert got.timestamp == timestamps()[want], f"timestamp of offset {want}: {got.timestamp}"
    finally:
        c.close()


def test_latest_moves_with_appends(broker, topic_name):
    rd_create_topic(broker.bootstrap, topic_name, 1)
    c = rd_consumer(broker.bootstrap)
    k = kp_consumer(broker.bootstrap)
    try:
        tp = kafka.TopicPartition(topic_name, 0)
        producer = rd_producer(broker.bootstrap, acks="1")
        for total in (1, 5, 30):
            have = c.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=10, cached=False)[1]
            rd_produce(producer, topic_name, [Msg(None, b"x", (), None, 0)] * (total - have))
            assert c.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=10, cached=False) == (0, total)
            assert k.end_offsets([tp]) == {tp: total}
    finally:
        c.close()
        k.close()


def test_max_timestamp_is_the_record_with_the_largest_timestamp(broker, topic_name):
    """ListOffsets v7 MAX_TIMESTAMP (KIP-734), as confluent-kafka's AdminClient asks it: the
    offset and timestamp of the record with the largest timestamp — here one in the middle of
    the log and in the middle of a batch — not the high watermark."""
    from confluent_kafka.admin import AdminClient, OffsetSpec

    rd_create_topic(broker.bootstrap, topic_name, 2)
    one_by_one = rd_producer(broker.bootstrap, acks="all")
    stamps = [T0 + 5000, T0 + 1000, T0 + 9000, T0 + 2000, T0 + 9000, T0 + 3000]
    for i, ts in enumerate(stamps):
        rd_produce(one_by_one, topic_name, [Msg(None, f"v{i}".encode(), (), ts, 0)])
    rd_produce(rd_producer(broker.bootstrap, acks="all", **{"linger.ms": 200}), topic_name,
               [Msg(None, f"v{i}".encode(), (), ts, 1) for i, ts in enumerate(stamps)])
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    empty_topic = topic_name + "-empty"
    rd_create_topic(broker.bootstrap, empty_topic, 1)
    asks = {TopicPartition(topic_name, 0): OffsetSpec.max_timestamp(),
            TopicPartition(topic_name, 1): OffsetSpec.max_timestamp(),
            TopicPartition(empty_topic, 0): OffsetSpec.max_timestamp()}
    got = {tp: f.result(timeout=10) for tp, f in admin.list_offsets(asks).items()}
    for p in (0, 1):
        r = got[TopicPartition(topic_name, p)]
        # The earliest of the two records stamped T0 + 9 s.
        assert (r.offset, r.timestamp) == (2, T0 + 9000), f"partition {p}: {r.offset}, {r.timestamp}"
    r = got[TopicPartition(empty_topic, 0)]
    assert r.offset == -1, f"an empty partition has no record with a max timestamp: {r.offset}"
