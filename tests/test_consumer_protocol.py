"""Consumer-protocol groups (KIP-848, `group.protocol=consumer`) with librdkafka.

The broker assigns: members send ConsumerGroupHeartbeat, a partition moves to a new owner only
after its old owner revoked it, and each member's epoch says which assignment it commits for.
What a user notices, tested here with librdkafka 2.16 (confluent-kafka):
- members joining and leaving every second while records are produced: every record is read,
  none twice (each member commits after every record it processes);
- a commit with a stale member epoch is refused, and so is a member the group does not know;
- the group is listed and described as a consumer-protocol group, and a classic member joins
  it (online migration) and is given a partition the other member gave up;
- a regex subscription (KIP-848's SubscribedTopicRegex, resolved by the broker) reads the
  matching topics, and a matching topic created later within a few heartbeats;
- with the authorizer on, the regex only reaches topics the principal may DESCRIBE, and naming
  one it may not is refused (TOPIC_AUTHORIZATION_FAILED);
- the protocol is on by default, as in Kafka 4, and `classic` alone turns it off.
Java's consumer is in tests/java/clients (ConsumerProtocolTest).
"""

from __future__ import annotations

import random
import threading
import time

import confluent_kafka
import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient

import kafka_wire
from clients import rd_conf, rd_create_topic, rd_producer

FAST = {"group.consumer.heartbeat.interval.ms": "300", "group.consumer.session.timeout.ms": "6000"}


@pytest.fixture
def broker(broker_factory):
    return broker_factory(settings=FAST, cores=2)


def member(bootstrap: str, group: str, name: str, **extra) -> Consumer:
    return Consumer(rd_conf(bootstrap, **{"group.id": group, "group.protocol": "consumer",
                                          "auto.offset.reset": "earliest", "enable.auto.commit": False,
                                          "client.id": name, **extra}))


def poll_errors(c: Consumer, errors: list, timeout: float) -> list:
    """Polls `c` until `errors` has an entry (a callback may add one too) or `timeout`
    passes, adding the code of each error event; `errors`."""
    end = time.monotonic() + timeout
    while time.monotonic() < end and not errors:
        m = c.poll(0.2)
        if m is not None and m.error():
            errors.append(m.error().code())
    return errors


def test_members_joining_and_leaving_every_second_read_every_record_once(broker, topic_name):
    partitions, total = 6, 3000
    rd_create_topic(broker.bootstrap, topic_name, partitions)
    group = f"{topic_name}-g"
    seen: dict[tuple[int, int], str] = {}
    dups: list[str] = []
    lock = threading.Lock()
    stop_all = threading.Event()

    def run(name: str, stop: threading.Event):
        c = member(broker.bootstrap, group, name)
        c.subscribe([topic_name])
        try:
            while not stop.is_set() and not stop_all.is_set():
                m = c.poll(0.1)
                if m is None or m.error():
                    continue
                key = (m.partition(), m.offset())
                with lock:
                    if key in seen:
                        dups.append(f"{key} read by {seen[key]} then {name}")
                    seen[key] = name
                c.commit(message=m, asynchronous=False)
        finally:
            c.close()

    def produce():
        p = rd_producer(broker.bootstrap)
        for i in range(total):
            p.produce(topic_name, value=b"%d" % i, partition=i % partitions)
            if i % 100 == 99:
                p.flush(10)
                time.sleep(0.3)  # spread over the churn (~9 s)
        assert p.flush(30) == 0

    producer = threading.Thread(target=produce)
    producer.start()
    members: list[tuple[threading.Thread, threading.Event]] = []
    rng = random.Random(848)
    n = 0
    deadline = time.monotonic() + 15
    try:
        while time.monotonic() < deadline:
            if len(members) < 2 or (len(members) < 4 and rng.random() < 0.6):
                stop = threading.Event()
                t = threading.Thread(target=run, args=(f"m{n}", stop))
                n += 1
                t.start()
                members.append((t, stop))
            else:
                t, stop = members.pop(rng.randrange(len(members)))
                stop.set()
                t.join(30)
            time.sleep(1)
        producer.join(60)
        # The members left read the rest.
        end = time.monotonic() + 60
        while time.monotonic() < end:
            with lock:
                if len(seen) >= total:
                    break
            time.sleep(0.2)
    finally:
        stop_all.set()
        for t, _ in members:
            t.join(30)
    assert n >= 8, f"only {n} members came and went"
    assert dups == [], f"{len(dups)} records read twice after their commit: {dups[:10]}"
    missing = [(p, o) for p in range(partitions) for o in range(total // partitions) if (p, o) not in seen]
    assert missing == [], f"{len(missing)} records never read: {missing[:10]}"


def test_stale_and_unknown_members_cannot_commit_and_a_classic_member_joins(broker, topic_name):
    rd_create_topic(broker.bootstrap, topic_name, 2)
    group = f"{topic_name}-g"
    c = member(broker.bootstrap, group, "only")
    c.subscribe([topic_name])
    try:
        deadline = time.monotonic() + 30
        while len(c.assignment()) < 2:
            assert time.monotonic() < deadline, "no assignment"
            c.poll(0.2)
        c.commit(offsets=[TopicPartition(topic_name, 0, 0)], asynchronous=False)

        admin = AdminClient(rd_conf(broker.bootstrap))
        listed = admin.list_consumer_groups(request_timeout=15).result(30)
        mine = [g for g in listed.valid if g.group_id == group]
        assert len(mine) == 1 and mine[0].type == confluent_kafka.ConsumerGroupType.CONSUMER, listed.valid
        d = admin.describe_consumer_groups([group], request_timeout=15)[group].result(30)
        assert d.type == confluent_kafka.ConsumerGroupType.CONSUMER, d
        assert d.state == confluent_kafka.ConsumerGroupState.STABLE, d
        assert len(d.members) == 1 and len(d.members[0].assignment.topic_partitions) == 2, d

        # A classic librdkafka member joins the consumer-protocol group (online migration, as
        # Kafka 4's default): the broker assigns it a partition the other member gives up.
        classic = Consumer(rd_conf(broker.bootstrap, **{"group.id": group, "session.timeout.ms": 6000,
                                                        "heartbeat.interval.ms": 500}))
        classic.subscribe([topic_name])
        try:
            deadline = time.monotonic() + 45
            while not (len(c.assignment()) == 1 and len(classic.assignment()) == 1):
                assert time.monotonic() < deadline, (c.assignment(), classic.assignment())
                c.poll(0.1)
                classic.poll(0.1)
            assert {p.partition for p in c.assignment() + classic.assignment()} == {0, 1}
            d = admin.describe_consumer_groups([group], request_timeout=15)[group].result(30)
            assert d.type == confluent_kafka.ConsumerGroupType.CONSUMER and len(d.members) == 2, d
        finally:
            classic.close()
        # It leaves: the consumer-protocol member takes its partition back.
        deadline = time.monotonic() + 30
        while len(c.assignment()) < 2:
            assert time.monotonic() < deadline, c.assignment()
            c.poll(0.2)

        # An admin commit (no member) to a group with members is refused as Kafka refuses it.
        outsider = Consumer(rd_conf(broker.bootstrap, **{"group.id": group}))
        try:
            with pytest.raises(confluent_kafka.KafkaException) as e:
                outsider.commit(offsets=[TopicPartition(topic_name, 0, 5)], asynchronous=False)
            assert e.value.args[0].code() == KafkaError.UNKNOWN_MEMBER_ID, e.value
        finally:
            outsider.close()
        got = c.committed([TopicPartition(topic_name, 0)], timeout=15)
        assert got[0].offset == 0, "the refused commit changed nothing"
    finally:
        c.close()


def describe(bootstrap: str, group: str):
    admin = AdminClient(rd_conf(bootstrap))
    return admin.describe_consumer_groups([group], request_timeout=15)[group].result(30)


def test_a_consumer_group_survives_kill9_of_the_broker_without_a_rebalance(broker_factory, topic_name):
    """The group's state (epochs, assignments) is stored in its offsets bucket before a heartbeat
    is answered: after kill -9 and a restart the members go on with the same member ids, epochs
    and partitions — no revocation, no partitions lost, no rejoin."""
    b = broker_factory(settings=FAST, cores=2, fixed_port=True)
    rd_create_topic(b.bootstrap, topic_name, 4)
    group = f"{topic_name}-g"
    events: dict[str, list[str]] = {"a": [], "b": []}
    members = {}
    for name in ("a", "b"):
        c = member(b.bootstrap, group, name)
        c.subscribe([topic_name],
                    on_assign=lambda _c, ps, n=name: events[n].append(f"assigned {sorted(p.partition for p in ps)}"),
                    on_revoke=lambda _c, ps, n=name: events[n].append(f"revoked {sorted(p.partition for p in ps)}"),
                    on_lost=lambda _c, ps, n=name: events[n].append(f"lost {sorted(p.partition for p in ps)}"))
        members[name] = c
    try:
        deadline = time.monotonic() + 60
        while not (len(members["a"].assignment()) == 2 and len(members["b"].assignment()) == 2):
            assert time.monotonic() < deadline, events
            for c in members.values():
                c.poll(0.1)
        for _ in range(10):
            for c in members.values():
                c.poll(0.1)
        before = describe(b.bootstrap, group)
        assert before.state == confluent_kafka.ConsumerGroupState.STABLE, before
        seen_before = {n: list(e) for n, e in events.items()}
        owned_before = {n: sorted(tp.partition for tp in c.assignment()) for n, c in members.items()}

        b.kill9()
        # The members reconnect and heartbeat with their epochs: the restored group knows them.
        end = time.monotonic() + 15
        while time.monotonic() < end:
            for c in members.values():
                c.poll(0.1)
        after = describe(b.bootstrap, group)
        ids = lambda d: sorted((m.member_id, sorted(tp.partition for tp in m.assignment.topic_partitions))  # noqa: E731
                               for m in d.members)
        assert after.state == confluent_kafka.ConsumerGroupState.STABLE, after
        assert ids(after) == ids(before), (ids(before), ids(after))
        assert events == seen_before, f"a rebalance happened: before {seen_before}, after {events}"
        assert {n: sorted(tp.partition for tp in c.assignment()) for n, c in members.items()} == owned_before
    finally:
        for c in members.values():
            c.close()


def test_the_consumer_protocol_is_on_by_default_and_classic_turns_it_off(broker_factory, topic_name):
    """By default ConsumerGroupHeartbeat and ConsumerGroupDescribe are advertised, as on Kafka 4;
    with group.coordinator.rebalance.protocols=classic they are not (as Kafka without `consumer`
    in that list), so a consumer asking for group.protocol=consumer gets nothing assigned
    instead of half-working."""
    on = broker_factory(cores=2)
    off = broker_factory(settings={"group.coordinator.rebalance.protocols": "classic"}, cores=2)
    for b, listed in ((off, False), (on, True)):
        s = kafka_wire.connect(b.bootstrap)
        try:
            versions = kafka_wire.ping(s)
        finally:
            s.close()
        assert (68 in versions, 69 in versions) == (listed, listed), versions
    rd_create_topic(off.bootstrap, topic_name, 2)
    c = member(off.bootstrap, f"{topic_name}-g", "off")
    try:
        c.subscribe([topic_name])
        end = time.monotonic() + 5
        while time.monotonic() < end:
            c.poll(0.2)
        assert not c.assignment()
    finally:
        c.close()


def produce_one(bootstrap: str, topic: str, partitions: int) -> None:
    p = rd_producer(bootstrap)
    for i in range(partitions):
        p.produce(topic, b"%s-%d" % (topic.encode(), i), partition=i)
    assert p.flush(15) == 0


def read_until(c: Consumer, want: set[str], timeout: float = 30) -> set[str]:
    """Polls until a record of every topic in `want` was read; the topics read."""
    got: set[str] = set()
    end = time.monotonic() + timeout
    while not want <= got and time.monotonic() < end:
        m = c.poll(0.2)
        if m is not None and not m.error():
            got.add(m.topic())
    return got


def test_a_regex_subscription_reads_matching_topics_and_topics_created_later(broker, topic_name):
    """librdkafka sends a `^...` subscription to the broker as KIP-848's SubscribedTopicRegex:
    the broker resolves it against whole topic names and assigns what matches; a matching
    topic created while the member runs is assigned within a few heartbeats, and a topic that
    only contains the pattern is not read."""
    a, b, later, other = f"{topic_name}-rx-a", f"{topic_name}-rx-b", f"{topic_name}-rx-c", f"x-{topic_name}-rx-a"
    for t, n in ((a, 2), (b, 1), (other, 1)):
        rd_create_topic(broker.bootstrap, t, n)
        produce_one(broker.bootstrap, t, n)
    c = member(broker.bootstrap, f"{topic_name}-g", "rx")
    c.subscribe([f"^{topic_name}-rx-.*"])
    try:
        got = read_until(c, {a, b})
        assert got == {a, b}, got
        assert sorted((tp.topic, tp.partition) for tp in c.assignment()) == [(a, 0), (a, 1), (b, 0)]
        rd_create_topic(broker.bootstrap, later, 1)
        produce_one(broker.bootstrap, later, 1)
        got = read_until(c, {later})
        assert later in got, got
        assert other not in got | {tp.topic for tp in c.assignment()}
    finally:
        c.close()


def test_a_regex_reaches_only_topics_the_principal_may_describe(broker_factory, topic_name):
    from test_acls import SETTINGS, acl_add, login, setup
    broker = broker_factory(settings={**SETTINGS, **FAST}, cores=2)
    sasl = setup(broker, "alice")
    mine, secret = f"{topic_name}-rx-mine", f"{topic_name}-rx-secret"
    for t in (mine, secret):
        rd_create_topic(broker.bootstrap, t, 1)
        produce_one(broker.bootstrap, t, 1)
    group = f"{topic_name}-g"
    acl_add(broker, "--principal", "User:alice", "--operation", "read,describe", "--topic", mine)
    acl_add(broker, "--principal", "User:alice", "--operation", "read", "--group", group)

    c = member(sasl, group, "alice", **login("alice"))
    c.subscribe([f"^{topic_name}-rx-.*"])
    try:
        got = read_until(c, {mine, secret}, timeout=10)
        assert got == {mine}, got
        assert [tp.topic for tp in c.assignment()] == [mine]
    finally:
        c.close()

    # Naming the topic she may not describe is refused outright.
    c = member(sasl, group, "alice-named", **login("alice"))
    c.subscribe([secret])
    try:
        errors = poll_errors(c, [], 15)
        assert KafkaError.TOPIC_AUTHORIZATION_FAILED in errors, errors
        assert not c.assignment()
    finally:
        c.close()
