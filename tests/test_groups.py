"""Consumer groups against real clients: subscribe, rebalance, commit, resume (issue 4).

Each test drives the real `weir` binary with confluent-kafka (librdkafka) and kafka-python
consumers that use `subscribe` (the group coordinator hands out partitions) and commit their
progress to the broker.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import kafka
import pytest
from confluent_kafka import Consumer, TopicPartition

from clients import (CLIENT_TIMEOUT_S, Msg, kp_consumer, kp_producer, kp_produce, rd_conf, rd_create_topic,
                     rd_produce, rd_producer)

SESSION_MS = 6000


def group_consumer(bootstrap: str, group: str, **conf) -> Consumer:
    base = {
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": SESSION_MS,
        "heartbeat.interval.ms": 500,
        "fetch.wait.max.ms": 100,
    }
    base.update(conf)
    return Consumer(rd_conf(bootstrap, **base))


def produce_n(bootstrap: str, topic: str, n: int, partitions: int, start: int = 0) -> None:
    p = rd_producer(bootstrap)
    rd_produce(p, topic, [Msg(key=b"k%d" % i, value=b"v%d" % i, partition=i % partitions)
                          for i in range(start, start + n)])


def assigned(c: Consumer) -> set[int]:
    return {tp.partition for tp in c.assignment()}


def poll_until(consumers, cond, timeout: float = 30.0, sink=None):
    """Polls every consumer until cond() holds; records go to sink (list) if given."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        for c in consumers:
            m = c.poll(0.05)
            if m is not None and not m.error() and sink is not None:
                sink.append((m.partition(), m.offset(), m.value()))
        if cond():
            return
    raise AssertionError("condition not reached in time; assignments: "
                         + str([sorted(assigned(c)) for c in consumers]))


@pytest.mark.parametrize("n_consumers", [2, 3])
@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_subscribers_share_partitions_and_take_over_when_one_leaves(broker, topic_name, n_consumers, strategy):
    rd_create_topic(broker.bootstrap, topic_name, partitions=4)
    produce_n(broker.bootstrap, topic_name, 200, 4)
    group = f"g-{topic_name}"
    cs = [group_consumer(broker.bootstrap, group, **{"partition.assignment.strategy": strategy})
          for _ in range(n_consumers)]
    for c in cs:
        c.subscribe([topic_name])
    got: list = []

    def shared():
        sets = [assigned(c) for c in cs]
        return all(sets) and sum(len(s) for s in sets) == 4 and set().union(*sets) == {0, 1, 2, 3}

    poll_until(cs, lambda: shared() and len(got) >= 200, sink=got)
    sets = [assigned(c) for c in cs]
    for i in range(n_consumers):
        for j in range(i + 1, n_consumers):
            assert not sets[i] & sets[j], f"partitions assigned twice: {sets}"
    assert sorted((p, o) for p, o, _ in got) == sorted({(p, o) for p, o, _ in got}), "duplicates"
    assert len(got) == 200

    # One closes (LeaveGroup): the others take its partitions.
    cs[0].close()
    rest = cs[1:]
    poll_until(rest, lambda: set().union(*[assigned(c) for c in rest]) == {0, 1, 2, 3}
               and sum(len(assigned(c)) for c in rest) == 4)
    for c in rest:
        c.close()


def test_killed_member_partitions_move_after_session_timeout(broker, topic_name, tmp_path):
    rd_create_topic(broker.bootstrap, topic_name, partitions=4)
    group = f"g-{topic_name}"
    # A consumer in another process, killed with SIGKILL: it never sends LeaveGroup.
    script = tmp_path / "member.py"
    script.write_text(textwrap.dedent(f"""
        import sys, time
        from confluent_kafka import Consumer
        c = Consumer({{"bootstrap.servers": "{broker.bootstrap}", "group.id": "{group}",
                      "session.timeout.ms": {SESSION_MS}, "heartbeat.interval.ms": 500,
                      "broker.address.family": "v4"}})
        c.subscribe(["{topic_name}"])
        while True:
            c.poll(0.1)
            if c.assignment():
                print("assigned", flush=True)
    """))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "assigned"
        me = group_consumer(broker.bootstrap, group)
        me.subscribe([topic_name])
        poll_until([me], lambda: assigned(me) and len(assigned(me)) < 4)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        killed_at = time.time()
        poll_until([me], lambda: assigned(me) == {0, 1, 2, 3}, timeout=SESSION_MS / 1000 + 20)
        waited = time.time() - killed_at
        assert waited >= SESSION_MS / 1000 - 1.5, f"took over after {waited:.1f}s, before the session timeout"
        me.close()
    finally:
        if proc.poll() is None:
            proc.kill()


def consume_committing(bootstrap, group, topic, n, commit_async=False):
    """Consumes n records with a subscribing consumer, committing after each; returns them."""
    c = group_consumer(bootstrap, group)
    c.subscribe([topic])
    got = []
    deadline = time.time() + CLIENT_TIMEOUT_S
    while len(got) < n and time.time() < deadline:
        m = c.poll(0.1)
        if m is None or m.error():
            continue
        got.append((m.partition(), m.offset()))
        c.commit(message=m, asynchronous=commit_async)
    assert len(got) == n, f"consumed {len(got)} of {n}"
    if commit_async:
        c.commit(asynchronous=False)  # drain outstanding async commits
    positions = {tp.partition: tp.offset for tp in c.position(list(c.assignment()))}
    committed = {tp.partition: tp.offset for tp in c.committed(list(c.assignment()), timeout=10)}
    c.close()
    return got, positions, committed


@pytest.mark.parametrize("restart", ["none", "graceful", "kill9"])
@pytest.mark.parametrize("commit_async", [False, True])
def test_new_consumer_resumes_after_last_commit(broker, topic_name, restart, commit_async):
    rd_create_topic(broker.bootstrap, topic_name, partitions=2)
    produce_n(broker.bootstrap, topic_name, 100, 2)
    group = f"g-{topic_name}"
    first, positions, committed = consume_committing(broker.bootstrap, group, topic_name, 60, commit_async)
    # committed() and position() agree with what was consumed and committed.
    last = {}
    for p, o in first:
        last[p] = max(last.get(p, -1), o)
    assert positions == {p: o + 1 for p, o in last.items()}
    assert committed == positions
    if restart == "graceful":
        broker.restart()
    elif restart == "kill9":
        broker.kill9()
    rest, _, _ = consume_committing(broker.bootstrap, group, topic_name, 40, commit_async)
    for p in (0, 1):
        offs = [o for q, o in rest if q == p]
        assert offs == list(range(last.get(p, -1) + 1, 50)), f"partition {p}: resumed at {offs[:3]}..."
    assert len(set(first) | set(rest)) == 100, "gaps or duplicates across the two consumers"


def test_kafka_python_group_commit_and_resume(broker, topic_name):
    rd_create_topic(broker.bootstrap, topic_name, partitions=3)
    kp_produce(kp_producer(broker.bootstrap), topic_name,
               [Msg(key=None, value=b"%d" % i, partition=i % 3) for i in range(90)])
    group = f"kp-{topic_name}"
    c = kp_consumer(broker.bootstrap, group_id=group, session_timeout_ms=SESSION_MS,
                    heartbeat_interval_ms=500)
    c.subscribe([topic_name])
    got = []
    deadline = time.time() + CLIENT_TIMEOUT_S
    while len(got) < 45 and time.time() < deadline:
        for recs in c.poll(timeout_ms=200, max_records=45 - len(got)).values():
            got.extend((r.partition, r.offset) for r in recs)
    assert len(got) == 45
    c.commit()
    committed = {tp.partition: c.committed(tp) for tp in c.assignment()}
    assert committed == {tp.partition: c.position(tp) for tp in c.assignment()}
    c.close()
    c2 = kp_consumer(broker.bootstrap, group_id=group, session_timeout_ms=SESSION_MS,
                     heartbeat_interval_ms=500)
    c2.subscribe([topic_name])
    rest = []
    deadline = time.time() + CLIENT_TIMEOUT_S
    while len(rest) < 45 and time.time() < deadline:
        for recs in c2.poll(timeout_ms=200).values():
            rest.extend((r.partition, r.offset) for r in recs)
    c2.close()
    assert len(rest) == 45 and not set(rest) & set(got), "the second consumer re-read committed records"
    assert len(set(got) | set(rest)) == 90


def test_two_kafka_python_members_split_partitions(broker, topic_name):
    """Two kafka-python members, each polled by its own thread as an application would:
    (polling both from one thread with short timeouts makes kafka-python 3.0's leader abandon
    its sync and rejoin, over and over — a client-side effect, not a broker one)."""
    import threading

    rd_create_topic(broker.bootstrap, topic_name, partitions=4)
    group = f"kp2-{topic_name}"
    cs = [kp_consumer(broker.bootstrap, group_id=group, session_timeout_ms=SESSION_MS, heartbeat_interval_ms=300)
          for _ in range(2)]
    stop = threading.Event()

    def run(c):
        c.subscribe([topic_name])
        while not stop.is_set():
            c.poll(timeout_ms=300)

    threads = [threading.Thread(target=run, args=(c,), daemon=True) for c in cs]
    for t in threads:
        t.start()
    try:
        deadline = time.time() + 30
        while time.time() < deadline:
            sets = [{tp.partition for tp in c.assignment()} for c in cs]
            if all(sets) and sets[0] | sets[1] == {0, 1, 2, 3} and not sets[0] & sets[1]:
                break
            time.sleep(0.05)
        else:
            raise AssertionError(f"no disjoint split: {sets}")
    finally:
        stop.set()
        for t in threads:
            t.join(10)
        for c in cs:
            c.close()


def test_many_groups_do_not_interfere(broker, topic_name):
    rd_create_topic(broker.bootstrap, topic_name, partitions=1)
    produce_n(broker.bootstrap, topic_name, 10, 1)
    n = 200
    # Offsets committed by assign()-mode consumers (a group id, no membership).
    c = Consumer(rd_conf(broker.bootstrap, **{"group.id": "probe", "enable.auto.commit": False}))
    for i in range(n):
        c2 = Consumer(rd_conf(broker.bootstrap, **{"group.id": f"many-{i}", "enable.auto.commit": False}))
        c2.commit(offsets=[TopicPartition(topic_name, 0, i % 10)], asynchronous=False)
        c2.close()
    for i in (0, 1, 57, 133, 199):
        c3 = Consumer(rd_conf(broker.bootstrap, **{"group.id": f"many-{i}"}))
        got = c3.committed([TopicPartition(topic_name, 0)], timeout=10)
        assert got[0].offset == i % 10, f"group many-{i}: committed {got[0].offset}"
        c3.close()
    c.close()
    admin = __import__("confluent_kafka.admin", fromlist=["AdminClient"]).AdminClient(rd_conf(broker.bootstrap))
    listed = admin.list_consumer_groups(request_timeout=10).result()
    ids = {g.group_id for g in listed.valid}
    assert {f"many-{i}" for i in range(n)} <= ids
    # Deleting a group removes its offsets; the others stay.
    admin.delete_consumer_groups(["many-5"], request_timeout=10)["many-5"].result()
    c4 = Consumer(rd_conf(broker.bootstrap, **{"group.id": "many-5"}))
    assert c4.committed([TopicPartition(topic_name, 0)], timeout=10)[0].offset < 0
    c4.close()
    c5 = Consumer(rd_conf(broker.bootstrap, **{"group.id": "many-6"}))
    assert c5.committed([TopicPartition(topic_name, 0)], timeout=10)[0].offset == 6
    c5.close()


def test_describe_group_shows_members_and_state(broker, topic_name):
    rd_create_topic(broker.bootstrap, topic_name, partitions=2)
    group = f"d-{topic_name}"
    c = group_consumer(broker.bootstrap, group)
    c.subscribe([topic_name])
    poll_until([c], lambda: assigned(c) == {0, 1})
    from confluent_kafka.admin import AdminClient
    admin = AdminClient(rd_conf(broker.bootstrap))
    d = admin.describe_consumer_groups([group], request_timeout=10)[group].result()
    assert str(d.state).endswith("STABLE"), d.state
    assert len(d.members) == 1
    assert {tp.partition for tp in d.members[0].assignment.topic_partitions} == {0, 1}
    c.close()


@pytest.mark.parametrize("reset", ["earliest", "latest"])
def test_new_group_starts_where_the_reset_policy_says(broker, topic_name, reset):
    rd_create_topic(broker.bootstrap, topic_name, partitions=1)
    produce_n(broker.bootstrap, topic_name, 10, 1)
    c = group_consumer(broker.bootstrap, f"r-{topic_name}", **{"auto.offset.reset": reset})
    c.subscribe([topic_name])
    got: list = []
    poll_until([c], lambda: assigned(c) == {0}, sink=got)
    # Give an "earliest" consumer time to read the history, then produce 5 more.
    poll_until([c], lambda: reset == "latest" or len(got) >= 10, sink=got)
    if reset == "latest":
        # librdkafka resolves "latest" (ListOffsets) as soon as the partition is assigned and
        # starts fetching from there; keep polling a moment so that happens before new data.
        settle = time.time() + 1.5
        poll_until([c], lambda: time.time() > settle, sink=got)
        assert got == [], f"a latest-reset consumer read history: {got[:3]}"
    produce_n(broker.bootstrap, topic_name, 5, 1, start=10)
    poll_until([c], lambda: any(o == 14 for _, o, _ in got), sink=got)
    offsets = [o for _, o, _ in got]
    assert offsets == (list(range(15)) if reset == "earliest" else list(range(10, 15))), offsets
    c.close()


def test_kafka_python_pinned_to_kafka_4_0_uses_groups(broker, topic_name):
    """kafka-python with `api_version=(4, 0)` (a common setting) uses Kafka 4.0's version table
    rather than ApiVersions' and sends FindCoordinator v6 and DescribeGroups v6; weir spoke up
    to v5 and closed the connection, so the consumer never joined its group (found running
    kafka-python's own suite with KAFKA_VERSION=4.0.0)."""
    rd_create_topic(broker.bootstrap, topic_name, partitions=2)
    kp_produce(kp_producer(broker.bootstrap), topic_name,
               [Msg(key=None, value=b"%d" % i, partition=i % 2) for i in range(20)])
    group = f"kp40-{topic_name}"
    c = kp_consumer(broker.bootstrap, group_id=group, api_version=(4, 0),
                    session_timeout_ms=SESSION_MS, heartbeat_interval_ms=500)
    # Subscribing only once bootstrapped: kafka-python 3.0.12 loses a subscription made while
    # its bootstrap Metadata request is in flight.
    c.bootstrap(timeout_ms=int(CLIENT_TIMEOUT_S * 1000))
    c.subscribe([topic_name])
    got = []
    deadline = time.time() + CLIENT_TIMEOUT_S
    while len(got) < 20 and time.time() < deadline:
        for recs in c.poll(timeout_ms=200).values():
            got.extend((r.partition, r.offset) for r in recs)
    assert sorted(got) == sorted((p, o) for p in range(2) for o in range(10))
    c.commit()
    admin = kafka.KafkaAdminClient(bootstrap_servers=broker.bootstrap, api_version=(4, 0),
                                   request_timeout_ms=int(CLIENT_TIMEOUT_S * 1000))
    try:
        [d] = admin.describe_groups([group]).values()
        assert (d["group_id"], d.get("group_state"), len(d["members"])) == (group, "Stable", 1), sorted(d)
        assert admin.list_group_offsets(group)[group][kafka.TopicPartition(topic_name, 0)].offset == 10
    finally:
        admin.close()
        c.close()


def test_a_broker_restart_costs_no_rebalance(broker_factory, topic_name):
    """Issue 19, "what is left" item 2, on one broker: a consumer's group survives the broker's
    restart (SIGTERM, started again on the same data dir and port). What broke: the restarted
    broker had no groups, so the member's next heartbeat got UNKNOWN_MEMBER_ID and it rejoined
    (its partitions revoked and assigned again under a new member id). Now the group is
    restored Stable from its state in the offsets log: the member goes on under the same id
    and its on_assign callback runs once."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # A fixed port of our own (not 9092: other tests may hold it), so the client finds the
    # restarted broker where it was; one listener, so the coordinator is that address.
    broker = broker_factory(settings={"listeners": f"PLAINTEXT://127.0.0.1:{port}",
                                      "listeners.per.core": "false"})
    rd_create_topic(broker.bootstrap, topic_name, 2)
    produce_n(broker.bootstrap, topic_name, 20, 2)
    assigns, revokes = [], []
    c = group_consumer(broker.bootstrap, topic_name, **{"session.timeout.ms": 10000,
                                                        "heartbeat.interval.ms": 300})
    c.subscribe([topic_name], on_assign=lambda _c, ps: assigns.append(len(ps)),
                on_revoke=lambda _c, ps: revokes.append(len(ps)))
    got = []
    poll_until([c], lambda: len(got) >= 20, sink=got)
    member = c.memberid()

    broker.stop()
    broker.start()
    assert broker.port == port
    produce_n(broker.bootstrap, topic_name, 20, 2, start=20)
    poll_until([c], lambda: len(got) >= 40, sink=got)
    # Heartbeats to the restarted broker for a while (an unknown member is told at once).
    end = time.time() + 3
    while time.time() < end:
        c.poll(0.1)
    print(f"after the restart: assigns {assigns}, revokes {revokes}")
    assert c.memberid() == member, "the member rejoined under a new member id"
    assert (assigns, revokes) == ([2], []), "the restart caused a rebalance"
    assert sorted(v for _, _, v in got) == sorted(b"v%d" % i for i in range(40))
    c.close()
