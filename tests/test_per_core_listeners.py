"""`listeners.per.core`: each core is advertised as its own broker.

A connection lands on whichever core accepted it, while a partition lives on one core: without
per-core endpoints most produce and fetch requests cross to another core and back. With
`listeners.per.core=true` (the default) every core also listens on its own port (the listen
port + 1 + core, or kernel-picked with port 0), Metadata lists one broker per core, and each
partition's leader is the core that owns it — clients send each request straight to its
owner. The bootstrap port still answers everything (requests for other cores' partitions are
forwarded), and `listeners.per.core=false` keeps the one-node view.
"""

from __future__ import annotations

import json
import subprocess

import pytest
from confluent_kafka import Consumer, TopicPartition

import kafka_wire
from clients import (Msg, kcat, kp_consume, kp_produce, kp_producer, rd_conf, rd_consume, rd_consumer,
                     rd_create_topic, rd_produce, rd_producer)
from conftest import WEIR_BIN


def metadata(broker, topic: str) -> dict:
    return json.loads(kcat(broker.bootstrap, "-L", "-J", "-t", topic).stdout)


def owners(broker, topic: str) -> list[int]:
    meta = json.loads((broker.data_dir / "weir-metadata.json").read_text())
    return meta["topics"][topic]["owners"]


def test_each_core_is_a_broker_leading_the_partitions_it_owns(broker_factory, topic_name):
    broker = broker_factory(cores=2)
    rd_create_topic(broker.bootstrap, topic_name, 4)
    md = metadata(broker, topic_name)
    brokers = {b["id"]: b["name"] for b in md["brokers"]}
    assert sorted(brokers) == [0, 1], md["brokers"]
    ports = {int(name.rsplit(":", 1)[1]) for name in brokers.values()}
    assert len(ports) == 2 and broker.port not in ports, f"two own ports, not the bootstrap one: {brokers}"
    (t,) = md["topics"]
    leaders = [p["leader"] for p in sorted(t["partitions"], key=lambda p: p["partition"])]
    assert leaders == owners(broker, topic_name)
    assert set(leaders) == {0, 1}, "4 partitions are spread over both cores"

    # Every client works through it: librdkafka, kafka-python and kcat, writing and reading.
    msgs = [Msg(key=b"k%d" % i, value=b"v%d" % i, partition=i % 4) for i in range(200)]
    rd_produce(rd_producer(broker.bootstrap, acks="all"), topic_name, msgs[:100])
    kp_produce(kp_producer(broker.bootstrap), topic_name, msgs[100:])
    got = rd_consume(broker.bootstrap, topic_name, range(4), 200)
    assert sorted(r.value for r in got) == sorted(m.value for m in msgs)
    got = kp_consume(broker.bootstrap, topic_name, range(4), 200)
    assert sorted(r.value for r in got) == sorted(m.value for m in msgs)
    out = kcat(broker.bootstrap, "-C", "-t", topic_name, "-p", "0", "-o", "beginning", "-e", "-f", "%s\n").stdout.decode()
    assert sorted(out.split()) == sorted(m.value.decode() for m in msgs if m.partition == 0)


def test_group_coordinator_is_the_groups_core(broker_factory, topic_name):
    """A consumer group commits through its coordinator core's own endpoint and the commit
    comes back to a new member of the group."""
    broker = broker_factory(cores=2)
    rd_create_topic(broker.bootstrap, topic_name, 2)
    rd_produce(rd_producer(broker.bootstrap), topic_name, [Msg(key=None, value=b"x%d" % i, partition=i % 2)
                                                             for i in range(20)])
    group = f"{topic_name}-g"
    c = rd_consumer(broker.bootstrap, **{"group.id": group, "auto.offset.reset": "earliest",
                                         "enable.auto.commit": False})
    c.subscribe([topic_name])
    seen = 0
    for _ in range(200):
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            seen += 1
        if seen == 20:
            break
    assert seen == 20
    c.commit(offsets=[TopicPartition(topic_name, 0, 10), TopicPartition(topic_name, 1, 10)], asynchronous=False)
    c.close()
    c = rd_consumer(broker.bootstrap, **{"group.id": group})
    committed = c.committed([TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)], timeout=20)
    c.close()
    assert [tp.offset for tp in committed] == [10, 10]


@pytest.mark.parametrize("cores", [2])
def test_off_keeps_one_broker(broker_factory, topic_name, cores):
    broker = broker_factory(settings={"listeners.per.core": "false"}, cores=cores)
    rd_create_topic(broker.bootstrap, topic_name, 4)
    md = metadata(broker, topic_name)
    assert [b["name"] for b in md["brokers"]] == [broker.bootstrap]
    (t,) = md["topics"]
    assert {p["leader"] for p in t["partitions"]} == {0}
    msgs = [Msg(key=None, value=b"v%d" % i, partition=i % 4) for i in range(40)]
    rd_produce(rd_producer(broker.bootstrap), topic_name, msgs)
    assert len(rd_consume(broker.bootstrap, topic_name, range(4), 40)) == 40


def test_list_groups_names_each_group_once(broker_factory, topic_name):
    """Each core-broker lists only the groups it coordinates, as each Kafka broker lists its
    own: clients ask every broker and concatenate the answers (librdkafka's
    rd_kafka_list_groups, 0019_list_groups, saw every group once per core). The bootstrap
    port, which tools use alone, still lists them all."""
    broker = broker_factory(cores=2)
    rd_create_topic(broker.bootstrap, topic_name, 1)
    groups = [f"{topic_name}-g{i}" for i in range(8)]
    for g in groups:
        c = Consumer(rd_conf(broker.bootstrap, **{"group.id": g, "enable.auto.commit": False}))
        c.commit(offsets=[TopicPartition(topic_name, 0, 1)], asynchronous=False)
        c.close()

    def listed(addr: str) -> list[str]:
        with kafka_wire.connect(addr) as sock:
            sock.sendall(kafka_wire.list_groups(7))
            corr, body = kafka_wire.read_response(sock)
        error, ids = kafka_wire.parse_list_groups_v0(body)
        assert (corr, error) == (7, 0)
        return [g for g in ids if g.startswith(topic_name)]

    per_broker = {b["id"]: listed(b["name"]) for b in metadata(broker, topic_name)["brokers"]}
    assert sorted(sum(per_broker.values(), [])) == groups, per_broker
    assert all(per_broker.values()), f"8 groups land on both cores: {per_broker}"
    assert sorted(listed(broker.bootstrap)) == groups
    out = subprocess.run([str(WEIR_BIN), "group", "list", "--bootstrap", broker.bootstrap, "--json"],
                         capture_output=True, text=True, check=True, timeout=30).stdout
    assert sorted(g["group"] for g in json.loads(out)["groups"] if g["group"].startswith(topic_name)) == groups
