"""Consumer-group membership as Kafka clients expect it (issue 21), with confluent-kafka.

- A member may commit while its group prepares a rebalance (the commit librdkafka makes in
  its revoke callback); weir refused it with REBALANCE_IN_PROGRESS, so the offsets of the
  revoked partitions were lost and the next owner reprocessed them.
- A commit to a topic or partition that does not exist gets UNKNOWN_TOPIC_OR_PARTITION;
  weir accepted it.
- Static membership (KIP-345): a restarted member with the same group.instance.id gets its
  partitions back without the others rebalancing; an older incarnation is fenced
  (FENCED_INSTANCE_ID); a closed static member stays until its session times out. weir
  only recorded the instance id, so a restart rebalanced everyone.
- A member that closes (LeaveGroup) leaves DescribeGroups at once.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from clients import rd_conf, rd_create_topic
from test_groups import assigned, group_consumer, poll_until, produce_n


def describe(bootstrap: str, group: str):
    admin = AdminClient(rd_conf(bootstrap))
    return admin.describe_consumer_groups([group], request_timeout=10)[group].result()


def wait_members(bootstrap: str, group: str, n: int, timeout: float, consumers=()) -> float:
    """Waits until DescribeGroups lists n members (polling consumers meanwhile); returns
    the seconds it took."""
    start = time.time()
    while True:
        d = describe(bootstrap, group)
        if len(d.members) == n:
            return time.time() - start
        if time.time() - start > timeout:
            raise AssertionError(f"group has {len(d.members)} members after {timeout}s, want {n}: "
                                 + str([m.member_id for m in d.members]))
        for c in consumers:
            c.poll(0.1)
        time.sleep(0.1)


def test_commit_in_the_revoke_callback_during_a_rebalance_sticks(broker, topic_name):
    # Before the fix weir answered REBALANCE_IN_PROGRESS to a commit from a current member
    # while the group was PreparingRebalance, so this commit raised and was lost.
    rd_create_topic(broker.bootstrap, topic_name, partitions=2)
    produce_n(broker.bootstrap, topic_name, 20, 2)
    group = f"cr-{topic_name}"
    outcome: dict = {}
    a = group_consumer(broker.bootstrap, group)

    def on_revoke(consumer, parts):
        if not parts or "error" in outcome or "ok" in outcome:
            return
        offsets = [TopicPartition(topic_name, p.partition, 7) for p in parts]
        try:
            res = consumer.commit(offsets=offsets, asynchronous=False)
            errs = [tp.error for tp in res if tp.error is not None]
            outcome["error" if errs else "ok"] = errs or res
        except KafkaException as e:
            outcome["error"] = e.args[0]

    a.subscribe([topic_name], on_revoke=on_revoke)
    poll_until([a], lambda: assigned(a) == {0, 1})
    b = group_consumer(broker.bootstrap, group)
    b.subscribe([topic_name])
    poll_until([a, b], lambda: bool(outcome) and assigned(a) and assigned(b))
    assert "ok" in outcome, f"commit during the rebalance failed: {outcome}"
    committed = b.committed([TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)], timeout=10)
    assert [tp.offset for tp in committed] == [7, 7]
    a.close()
    b.close()


@pytest.mark.parametrize("with_group", [True, False], ids=["subscribed", "simple"])
def test_commit_to_a_missing_topic_or_partition_is_refused(broker, topic_name, with_group):
    # Before the fix weir stored offsets for any topic name and partition index.
    rd_create_topic(broker.bootstrap, topic_name, partitions=1)
    group = f"cm-{topic_name}"
    c = group_consumer(broker.bootstrap, group)
    if with_group:
        c.subscribe([topic_name])
        poll_until([c], lambda: assigned(c) == {0})
    offsets = [TopicPartition(topic_name, 0, 3), TopicPartition(topic_name, 5, 3),
               TopicPartition(f"{topic_name}-nope", 0, 3)]
    try:
        res = c.commit(offsets=offsets, asynchronous=False)
        errors = {(tp.topic, tp.partition): tp.error.code() if tp.error else None for tp in res}
    except KafkaException as e:
        # librdkafka raises when any partition failed; the per-partition results are lost,
        # so check the error and then what got stored.
        assert e.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART, e
        errors = None
    if errors is not None:
        assert errors == {(topic_name, 0): None,
                          (topic_name, 5): KafkaError.UNKNOWN_TOPIC_OR_PART,
                          (f"{topic_name}-nope", 0): KafkaError.UNKNOWN_TOPIC_OR_PART}, errors
    got = c.committed([TopicPartition(topic_name, 0), TopicPartition(topic_name, 5)], timeout=10)
    assert got[0].offset == 3
    assert got[1].offset < 0, got
    c.close()


def static_consumer(bootstrap: str, group: str, instance: str, **conf) -> Consumer:
    return group_consumer(bootstrap, group, **{"group.instance.id": instance,
                                              "session.timeout.ms": 6000, **conf})


def test_restarted_static_member_gets_its_partitions_back_without_a_rebalance(broker, topic_name):
    # Before the fix the restart made a new member: the group rebalanced (the other member
    # was revoked and reassigned) and the old member stayed listed until its session expired.
    rd_create_topic(broker.bootstrap, topic_name, partitions=4)
    group = f"st-{topic_name}"
    events: list = []
    a = static_consumer(broker.bootstrap, group, "inst-a")
    b = static_consumer(broker.bootstrap, group, "inst-b")
    a.subscribe([topic_name])
    b.subscribe([topic_name], on_assign=lambda c, p: events.append("assign"),
                on_revoke=lambda c, p: events.append("revoke"))
    poll_until([a, b], lambda: assigned(a) and assigned(b) and len(assigned(a) | assigned(b)) == 4)
    before = assigned(a)
    d0 = describe(broker.bootstrap, group)
    assert sorted(m.group_instance_id for m in d0.members) == ["inst-a", "inst-b"]
    old_a = next(m.member_id for m in d0.members if m.group_instance_id == "inst-a")
    events.clear()
    a.close()  # a static member sends no LeaveGroup
    a2 = static_consumer(broker.bootstrap, group, "inst-a")
    a2.subscribe([topic_name])
    poll_until([a2, b], lambda: assigned(a2) == before, timeout=5.5)
    settle = time.time() + 2
    poll_until([a2, b], lambda: time.time() > settle)
    assert events == [], f"the other static member rebalanced: {events}"
    d = describe(broker.bootstrap, group)
    ids = {m.group_instance_id: m.member_id for m in d.members}
    assert sorted(ids) == ["inst-a", "inst-b"] and ids["inst-a"] != old_a, ids
    assert str(d.state).endswith("STABLE"), d.state
    a2.close()
    b.close()


def fenced(e: KafkaError) -> bool:
    """librdkafka reports FENCED_INSTANCE_ID as a fatal error."""
    return e.code() == KafkaError.FENCED_INSTANCE_ID or (
        e.code() == KafkaError._FATAL and "fenced" in e.str().lower())


def test_older_incarnation_of_a_static_member_is_fenced(broker, topic_name):
    # Before the fix two consumers with one group.instance.id were both members.
    rd_create_topic(broker.bootstrap, topic_name, partitions=2)
    group = f"sf-{topic_name}"
    errors: list = []
    old = static_consumer(broker.bootstrap, group, "twin", error_cb=errors.append)
    old.subscribe([topic_name])
    poll_until([old], lambda: assigned(old) == {0, 1})
    new = static_consumer(broker.bootstrap, group, "twin")
    new.subscribe([topic_name])
    deadline = time.time() + 20
    while not any(fenced(e) for e in errors):
        assert time.time() < deadline, f"the older incarnation was not fenced: {errors}"
        new.poll(0.05)
        m = old.poll(0.05)
        if m is not None and m.error():
            errors.append(m.error())
    # The fenced consumer is dead (fatal error); close it before librdkafka's own session
    # timer makes it try again.
    old.close()
    poll_until([new], lambda: assigned(new) == {0, 1})
    d = describe(broker.bootstrap, group)
    assert [m.group_instance_id for m in d.members] == ["twin"]
    new.close()


def test_closed_static_member_stays_until_its_session_times_out(broker, topic_name):
    rd_create_topic(broker.bootstrap, topic_name, partitions=2)
    group = f"se-{topic_name}"
    c = static_consumer(broker.bootstrap, group, "gone", **{"session.timeout.ms": 5000})
    c.subscribe([topic_name])
    poll_until([c], lambda: assigned(c) == {0, 1})
    c.close()
    assert len(describe(broker.bootstrap, group).members) == 1, "a static member left on close"
    took = wait_members(broker.bootstrap, group, 0, timeout=9)
    assert took > 3, f"the static member was removed after {took:.1f}s, before its session timed out"


def test_closed_member_leaves_the_group_at_once(broker, topic_name):
    # Issue 21 saw a closed member still listed more than 6 s after leaving with
    # session.timeout.ms=5000.
    rd_create_topic(broker.bootstrap, topic_name, partitions=2)
    group = f"lv-{topic_name}"
    a = group_consumer(broker.bootstrap, group, **{"session.timeout.ms": 5000})
    b = group_consumer(broker.bootstrap, group, **{"session.timeout.ms": 5000})
    a.subscribe([topic_name])
    b.subscribe([topic_name])
    poll_until([a, b], lambda: assigned(a) and assigned(b))
    b.close()
    took = wait_members(broker.bootstrap, group, 1, timeout=3, consumers=[a])
    poll_until([a], lambda: assigned(a) == {0, 1})
    a.close()
    took2 = wait_members(broker.bootstrap, group, 0, timeout=3)
    assert took < 3 and took2 < 3
