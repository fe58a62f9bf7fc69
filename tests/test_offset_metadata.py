"""Committed-offset metadata over `offset.metadata.max.bytes` is refused, not cut.

What broke: weir stored at most 65,535 bytes of an OffsetCommit's metadata string and silently
cut the rest; Kafka refuses metadata over `offset.metadata.max.bytes` (4096) with
OFFSET_METADATA_TOO_LARGE for that partition and stores nothing for it. Now weir does too: the
other partitions of the same commit are stored, and metadata within the limit reads back intact.
"""

from __future__ import annotations

import kafka
import kafka.errors
import pytest
from kafka.structs import OffsetAndMetadata, TopicPartition

from clients import rd_create_topic


def test_offset_metadata_over_the_limit_is_refused(broker, topic_name):
    rd_create_topic(broker.bootstrap, topic_name, 2)
    group = f"{topic_name}-g"
    c = kafka.KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=group, enable_auto_commit=False)
    try:
        tp0, tp1 = TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)
        c.assign([tp0, tp1])
        ok = "m" * 4096
        c.commit({tp0: OffsetAndMetadata(5, ok, -1), tp1: OffsetAndMetadata(7, "small", -1)})
        assert c.committed(tp0, metadata=True).metadata == ok
        with pytest.raises(kafka.errors.OffsetMetadataTooLargeError):
            c.commit({tp0: OffsetAndMetadata(9, "x" * 4097, -1)})
        got = c.committed(tp0, metadata=True)
        assert (got.offset, got.metadata) == (5, ok), "a refused commit changes nothing"
        assert c.committed(tp1) == 7
    finally:
        c.close()
