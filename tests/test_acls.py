"""ACLs (authorizer.class.name, super.users, CreateAcls/DescribeAcls/DeleteAcls) with real clients
over SASL: what a user notices is that a principal without the ACL to write gets
TOPIC_AUTHORIZATION_FAILED and nothing is written, one without READ cannot fetch or join a group,
Metadata hides the topics it may not describe, only a super user (or one with ALTER on the
cluster) manages ACLs and users, and ACLs survive a restart.

The brokers here listen on PLAINTEXT (loopback, principal User:ANONYMOUS, made a super user so
`weir user` / `weir acl` can manage the broker) and SASL_PLAINTEXT, where alice and bob log in.
"""

from __future__ import annotations

import json
import subprocess

import confluent_kafka
import pytest
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                   ResourcePatternType, ResourceType)

from clients import Msg, rd_conf, rd_consumer, rd_create_topic, rd_produce, rd_producer
from conftest import WEIR_BIN

SETTINGS = {
    "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:ANONYMOUS;User:admin",
}


def weir(broker, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(WEIR_BIN), *args, "--bootstrap", broker.bootstrap],
                          input=stdin.encode() if stdin else None, capture_output=True, timeout=30)


def login(user: str) -> dict:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": user, "sasl.password": f"{user}-pw"}


def setup(broker, *users: str) -> str:
    for u in users:
        r = weir(broker, "user", "add", u, "--password-stdin", stdin=f"{u}-pw\n")
        assert r.returncode == 0, r.stderr
    return broker.listener_bootstrap("SASL_PLAINTEXT")


def acl_add(broker, *args: str) -> None:
    r = weir(broker, "acl", "add", *args)
    assert r.returncode == 0, r.stderr


def high_watermark(bootstrap: str, topic: str, partition: int = 0) -> int:
    c = rd_consumer(bootstrap)
    try:
        return c.get_watermark_offsets(confluent_kafka.TopicPartition(topic, partition), timeout=10)[1]
    finally:
        c.close()


def test_write_read_and_group_need_their_acls(broker_factory, topic_name):
    broker = broker_factory(settings=SETTINGS, cores=2)
    sasl = setup(broker, "alice", "bob")
    rd_create_topic(broker.bootstrap, topic_name, 2)
    rd_create_topic(broker.bootstrap, topic_name + "-secret", 1)
    acl_add(broker, "--principal", "User:alice", "--operation", "write,read", "--topic", topic_name)
    acl_add(broker, "--principal", "User:alice", "--operation", "read", "--group", "alice-", "--prefixed")
    # bob may see the topic (so his client gets its metadata and sends the Produce and the
    # Fetch) and use the test consumers' groups, no more.
    acl_add(broker, "--principal", "User:bob", "--operation", "describe", "--topic", topic_name)
    acl_add(broker, "--principal", "User:bob", "--operation", "read", "--group", "weir-test-", "--prefixed")

    # bob may not write: his records are refused with TOPIC_AUTHORIZATION_FAILED, none written.
    errors = []
    p = rd_producer(sasl, retries=0, **login("bob"))
    for i in range(5):
        p.produce(topic_name, b"bob-%d" % i, partition=i % 2, on_delivery=lambda err, msg: errors.append(err))
    p.flush(15)
    assert len(errors) == 5 and all(e is not None for e in errors), errors
    assert {e.code() for e in errors} == {confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED}, errors
    assert high_watermark(broker.bootstrap, topic_name, 0) == 0
    assert high_watermark(broker.bootstrap, topic_name, 1) == 0

    # alice may write and read.
    msgs = [Msg(key=None, value=b"alice-%d" % i, partition=i % 2) for i in range(20)]
    rd_produce(rd_producer(sasl, acks="all", **login("alice")), topic_name, msgs)
    assert high_watermark(broker.bootstrap, topic_name, 0) + high_watermark(broker.bootstrap, topic_name, 1) == 20

    # Metadata: each sees the topic, neither the secret one.
    for who in ("alice", "bob"):
        seen = AdminClient(rd_conf(sasl, **login(who))).list_topics(timeout=20).topics
        assert topic_name in seen and topic_name + "-secret" not in seen, who

    # bob cannot fetch: the consumer reports TOPIC_AUTHORIZATION_FAILED.
    c = rd_consumer(sasl, **login("bob"))
    c.assign([confluent_kafka.TopicPartition(topic_name, 0, confluent_kafka.OFFSET_BEGINNING)])
    got_error = None
    for _ in range(20):
        m = c.poll(0.5)
        if m is not None and m.error():
            got_error = m.error().code()
            break
        assert m is None, "bob read a record"
    c.close()
    assert got_error == confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED

    # Groups: alice's prefixed group works; a group she has no ACL for is refused.
    c = rd_consumer(sasl, **{"group.id": "alice-app", "auto.offset.reset": "earliest"}, **login("alice"))
    c.subscribe([topic_name])
    got = []
    for _ in range(60):
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value())
        if len(got) == 20:
            break
    committed = c.commit(offsets=c.position(c.assignment()), asynchronous=False)
    assert all(tp.error is None for tp in committed), committed
    c.close()
    assert sorted(got) == sorted(m.value for m in msgs)
    c = rd_consumer(sasl, **{"group.id": "other-group"}, **login("alice"))
    c.subscribe([topic_name])
    err = None
    for _ in range(30):
        m = c.poll(0.5)
        if m is not None and m.error():
            err = m.error().code()
            break
    c.close()
    assert err == confluent_kafka.KafkaError.GROUP_AUTHORIZATION_FAILED

    # Creating topics needs CREATE; bob's CreateTopics is refused and creates nothing.
    admin = AdminClient(rd_conf(sasl, **login("bob")))
    fs = admin.create_topics([confluent_kafka.admin.NewTopic(topic_name + "-bob", 1, 1)])
    with pytest.raises(confluent_kafka.KafkaException) as e:
        fs[topic_name + "-bob"].result(10)
    assert e.value.args[0].code() == confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert topic_name + "-bob" not in AdminClient(rd_conf(broker.bootstrap)).list_topics(timeout=10).topics
    broker.check_alive()


def test_acl_admin_is_durable_and_needs_cluster_alter(broker_factory, topic_name):
    broker = broker_factory(settings=SETTINGS)
    sasl = setup(broker, "alice", "admin")
    # confluent-kafka's AdminClient as the super user admin, over SASL.
    admin = AdminClient(rd_conf(sasl, **login("admin")))
    bindings = [
        AclBinding(ResourceType.TOPIC, topic_name, ResourcePatternType.LITERAL, "User:alice", "*",
                   AclOperation.WRITE, AclPermissionType.ALLOW),
        AclBinding(ResourceType.TOPIC, "logs-", ResourcePatternType.PREFIXED, "User:*", "*",
                   AclOperation.READ, AclPermissionType.ALLOW),
        AclBinding(ResourceType.GROUP, "g", ResourcePatternType.LITERAL, "User:alice", "*",
                   AclOperation.READ, AclPermissionType.DENY),
    ]
    for f in admin.create_acls(bindings).values():
        f.result(10)
    every = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)
    assert sorted(map(str, admin.describe_acls(every).result(10))) == sorted(map(str, bindings))
    # MATCH: the ACLs that apply to topic logs-app.
    match = AclBindingFilter(ResourceType.TOPIC, "logs-app", ResourcePatternType.MATCH, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)
    assert [b.name for b in admin.describe_acls(match).result(10)] == ["logs-"]

    # A user without ALTER on the cluster may not change ACLs (or users).
    alice = AdminClient(rd_conf(sasl, **login("alice")))
    with pytest.raises(confluent_kafka.KafkaException) as e:
        [f.result(10) for f in alice.create_acls(bindings[:1]).values()]
    assert e.value.args[0].code() == confluent_kafka.KafkaError.CLUSTER_AUTHORIZATION_FAILED
    # DescribeAcls is refused too (CLUSTER_AUTHORIZATION_FAILED; librdkafka drops that
    # response-level error and shows an empty list, never the ACLs).
    assert alice.describe_acls(every).result(10) == []

    # Durable: a kill -9 keeps them; `weir acl` sees and removes them.
    broker.kill9()
    r = weir(broker, "acl", "list", "--json")
    assert r.returncode == 0, r.stderr
    listed = json.loads(r.stdout)["acls"]
    assert len(listed) == 3
    assert {"principal": "User:alice", "operation": "WRITE", "permission": "ALLOW", "resource_type": "TOPIC",
            "resource_name": topic_name, "pattern_type": "LITERAL", "host": "*"} in listed
    r = weir(broker, "acl", "remove", "--principal", "User:*", "--topic", "logs-", "--prefixed", "--json")
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)["removed"]) == 1
    admin = AdminClient(rd_conf(broker.listener_bootstrap("SASL_PLAINTEXT"), **login("admin")))
    assert len(admin.describe_acls(every).result(10)) == 2
    # Malformed ACLs are refused.
    bad = weir(broker, "acl", "add", "--principal", "alice", "--operation", "read", "--topic", "t")
    assert bad.returncode != 0 and b"TYPE:NAME" in bad.stderr


def test_acls_off_by_default_and_everyone_if_no_acl(broker_factory, topic_name):
    # Without an authorizer, every login may do everything (ACLs are stored, not enforced).
    broker = broker_factory(settings={"listeners": SETTINGS["listeners"]})
    sasl = setup(broker, "bob")
    acl_add(broker, "--principal", "User:alice", "--operation", "write", "--topic", topic_name)
    rd_produce(rd_producer(sasl, **login("bob")), topic_name, [Msg(key=None, value=b"x", partition=0)])
    # allow.everyone.if.no.acl.found: a topic no ACL names is open; one with ACLs is not.
    broker = broker_factory(settings={**SETTINGS, "allow.everyone.if.no.acl.found": "true"})
    sasl = setup(broker, "bob")
    rd_create_topic(broker.bootstrap, topic_name, 1)
    rd_create_topic(broker.bootstrap, topic_name + "-open", 1)
    acl_add(broker, "--principal", "User:alice", "--operation", "write", "--topic", topic_name)
    rd_produce(rd_producer(sasl, **login("bob")), topic_name + "-open", [Msg(key=None, value=b"y", partition=0)])
    errors = []
    p = rd_producer(sasl, retries=0, **login("bob"))
    p.produce(topic_name, b"z", partition=0, on_delivery=lambda err, msg: errors.append(err))
    p.flush(10)
    assert [e.code() for e in errors] == [confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED]


def test_client_certificate_names_the_principal(broker_factory, tmp_path, topic_name):
    """With ssl.client.auth=required, a client's principal is its certificate's subject in
    RFC 2253 form (Kafka's default), so ACLs can be written for certificate holders."""
    from tls_certs import Ca
    ca = Ca(tmp_path / "certs", "weir-test-ca")
    clients = Ca(tmp_path / "clients", "weir-clients-ca")
    server = ca.issue("server", server=True)
    broker = broker_factory(settings={
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "ssl.certificate.location": server.cert, "ssl.key.location": server.key,
        "ssl.client.auth": "required", "ssl.truststore.location": clients.pem,
        "authorizer.class.name": "weir", "super.users": "User:ANONYMOUS"})
    rd_create_topic(broker.bootstrap, topic_name, 1)
    alice = clients.issue("alice", server=False, org="weir")
    bob = clients.issue("bob", server=False, org="weir")
    principal = "User:CN=alice,OU=unit\\, 1,O=weir"
    acl_add(broker, "--principal", principal, "--operation", "write", "--topic", topic_name)

    def conf(who) -> dict:
        return {"security.protocol": "SSL", "ssl.ca.location": str(ca.pem),
                "ssl.certificate.location": str(who.cert), "ssl.key.location": str(who.key)}

    rd_produce(rd_producer(broker.ssl_bootstrap, acks="all", **conf(alice)), topic_name,
               [Msg(key=None, value=b"from alice", partition=0)])
    errors = []
    p = rd_producer(broker.ssl_bootstrap, retries=0, **conf(bob))
    p.produce(topic_name, b"from bob", partition=0, on_delivery=lambda err, msg: errors.append(err))
    p.flush(15)
    assert [e.code() for e in errors] == [confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED], errors
    assert high_watermark(broker.bootstrap, topic_name) == 1
