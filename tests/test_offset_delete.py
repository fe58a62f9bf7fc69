"""OffsetDelete (API 47) through kafka-python's KafkaAdminClient.delete_group_offsets and
`weir group delete-offsets`: a group's committed offsets of given partitions are deleted
durably (neither a restart nor a kill -9 brings them back from the offsets log), and Kafka's
rules hold — while a member of the group subscribes to the topic the delete is refused per
partition with GROUP_SUBSCRIBED_TO_TOPIC, an unknown group is GROUP_ID_NOT_FOUND. Before,
weir did not offer the API ("not supported by broker")."""

from __future__ import annotations

import time

import kafka
import kafka.errors
import pytest
from confluent_kafka import Consumer, TopicPartition

from clients import CLIENT_TIMEOUT_S, rd_conf, rd_create_topic, wait_for_topic
from test_admin_cli import weir, weir_json


def commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """Commits as a simple group (no membership), as admin tools do."""
    c = Consumer(rd_conf(bootstrap, **{"group.id": group, "enable.auto.commit": False}))
    try:
        c.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False)
    finally:
        c.close()


def committed(bootstrap: str, group: str, parts: list[tuple[str, int]]) -> list[int]:
    """The group's committed offsets of `parts`, -1001 (librdkafka's OFFSET_INVALID) where none."""
    c = Consumer(rd_conf(bootstrap, **{"group.id": group}))
    try:
        return [tp.offset for tp in c.committed([TopicPartition(t, p) for t, p in parts], timeout=10)]
    finally:
        c.close()


def kp_admin(bootstrap: str) -> kafka.KafkaAdminClient:
    return kafka.KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=int(CLIENT_TIMEOUT_S * 1000))


def test_delete_group_offsets_refused_while_subscribed_then_durable(broker, topic_name):
    other = f"{topic_name}-other"
    rd_create_topic(broker.bootstrap, topic_name, 2)
    rd_create_topic(broker.bootstrap, other, 1)
    group = f"g-{topic_name}"
    parts = [(topic_name, 0), (topic_name, 1), (other, 0)]
    commit(broker.bootstrap, group, {(topic_name, 0): 5, (topic_name, 1): 7, (other, 0): 9})
    assert committed(broker.bootstrap, group, parts) == [5, 7, 9]

    member = Consumer(rd_conf(broker.bootstrap, **{"group.id": group, "enable.auto.commit": False,
                                                  "auto.offset.reset": "earliest"}))
    admin = kp_admin(broker.bootstrap)
    try:
        member.subscribe([topic_name])
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while not member.assignment():
            assert time.monotonic() < deadline, "the member got no assignment"
            member.poll(0.2)
        # The member subscribes to topic_name, not to `other`.
        result = admin.delete_group_offsets(group, [kafka.TopicPartition(topic_name, 0),
                                                    kafka.TopicPartition(other, 0)])
        assert result == {kafka.TopicPartition(topic_name, 0): kafka.errors.GroupSubscribedToTopicError,
                          kafka.TopicPartition(other, 0): kafka.errors.NoError}, result
        assert committed(broker.bootstrap, group, parts) == [5, 7, -1001]
    finally:
        member.close()

    # The group is empty now: its offsets of topic_name can go.
    result = admin.delete_group_offsets(group, [kafka.TopicPartition(topic_name, 1)])
    assert result == {kafka.TopicPartition(topic_name, 1): kafka.errors.NoError}, result
    with pytest.raises(kafka.errors.GroupIdNotFoundError):
        admin.delete_group_offsets(f"{group}-never", [kafka.TopicPartition(topic_name, 0)])
    admin.close()
    assert committed(broker.bootstrap, group, parts) == [5, -1001, -1001]

    broker.restart()
    wait_for_topic(broker.bootstrap, topic_name, 2)
    assert committed(broker.bootstrap, group, parts) == [5, -1001, -1001], "after a restart"
    broker.kill9()
    wait_for_topic(broker.bootstrap, topic_name, 2)
    assert committed(broker.bootstrap, group, parts) == [5, -1001, -1001], "after a kill -9"


def test_weir_group_delete_offsets(broker, topic_name):
    rd_create_topic(broker.bootstrap, topic_name, 3)
    group = f"g-{topic_name}"
    parts = [(topic_name, p) for p in range(3)]
    commit(broker.bootstrap, group, {(topic_name, 0): 1, (topic_name, 1): 2, (topic_name, 2): 3})

    out = weir_json(broker, "group", "delete-offsets", group, "--topic", topic_name, "--partition", "2")
    assert out["offsets"] == [{"topic": topic_name, "partition": 2, "error": None}], out
    assert committed(broker.bootstrap, group, parts) == [1, 2, -1001]

    human = weir(broker, "group", "delete-offsets", group, "--topic", topic_name).stdout
    assert f"committed offsets of {group} deleted" in human, human
    assert committed(broker.bootstrap, group, parts) == [-1001, -1001, -1001]

    gone = weir(broker, "group", "delete-offsets", group, "--topic", topic_name, ok=False)
    assert gone.returncode == 1 and "GroupIdNotFound" in gone.stderr, gone.stderr
