"""ACLs on transactions (authorizer on): Kafka's rules for the TRANSACTIONAL_ID resource and the
group of send_offsets_to_transaction, with real clients over SASL.

What a user notices:

- WRITE on a topic is not enough to use a transactional.id: without WRITE on the
  TRANSACTIONAL_ID resource, init_transactions fails with TRANSACTIONAL_ID_AUTHORIZATION_FAILED
  (a fatal error in librdkafka, TransactionalIdAuthorizationFailedError in kafka-python) and
  nothing can be written with it. Once WRITE on that transactional id is granted (`weir acl add
  --transactional-id`: CreateAcls, resource type TRANSACTIONAL_ID), the same principal can begin, produce and commit; an id the
  ACL does not name (LITERAL) is still refused.
- A transaction may write only to topics the principal may WRITE: a record for a topic it may only
  DESCRIBE fails with TOPIC_AUTHORIZATION_FAILED, the transaction must be aborted, and nothing of
  it becomes visible; the next transaction works.
- send_offsets_to_transaction needs READ on the consumer group: for a group without it the call
  fails with GROUP_AUTHORIZATION_FAILED (abortable: the application aborts and goes on) and the
  group gets no committed offset; for a group it may READ the offsets are committed with the
  transaction.

The brokers listen on PLAINTEXT (loopback, User:ANONYMOUS, a super user: it creates the ACLs and
checks the results) and SASL_PLAINTEXT, where alice logs in (as in test_acls.py).
"""

from __future__ import annotations

import confluent_kafka
import kafka
import kafka.errors
import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from clients import kp_producer, rd_consumer, rd_create_topic, rd_producer
from test_acls import SETTINGS, acl_add, login, setup

TXN_CALL_S = 10.0


def grant_transactional_id(broker, principal: str, txn_id: str) -> None:
    """WRITE on TRANSACTIONAL_ID `txn_id` (LITERAL), with `weir acl add --transactional-id`
    (CreateAcls as the super user)."""
    acl_add(broker, "--principal", principal, "--operation", "write", "--transactional-id", txn_id)


def txn_producer(sasl: str, txn_id: str):
    return rd_producer(sasl, acks="all", **{"transactional.id": txn_id, "enable.idempotence": True,
                                            "message.timeout.ms": 10000}, **login("alice"))


def kafka_error(excinfo) -> KafkaError:
    return excinfo.value.args[0]


def read_committed(broker, topic: str, partitions: int, want: int) -> list[bytes]:
    """Values a read_committed consumer (the super user) reads from the beginning: until the
    positions reach the ends (markers included), at least `want` records, then a short quiet."""
    c = rd_consumer(broker.bootstrap, **{"isolation.level": "read_committed"})
    out: list[bytes] = []
    try:
        c.assign([TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING) for p in range(partitions)])
        for _ in range(100):
            msg = c.poll(0.1)
            if msg is not None:
                assert msg.error() is None, msg.error()
                out.append(msg.value())
            elif len(out) >= want:
                break
    finally:
        c.close()
    return out


def end_offsets(broker, topic: str, partitions: int) -> list[int]:
    c = rd_consumer(broker.bootstrap)
    try:
        return [c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
                for p in range(partitions)]
    finally:
        c.close()


@pytest.mark.timeout(60)
def test_transactional_id_needs_write_on_it(broker_factory, topic_name):
    broker = broker_factory(settings=SETTINGS, cores=2)
    sasl = setup(broker, "alice")
    rd_create_topic(broker.bootstrap, topic_name, 2)
    rd_create_topic(broker.bootstrap, topic_name + "-ro", 1)
    acl_add(broker, "--principal", "User:alice", "--operation", "write,read", "--topic", topic_name)
    acl_add(broker, "--principal", "User:alice", "--operation", "describe", "--topic", topic_name + "-ro")

    # WRITE on the topic but no ACL on the transactional id: init_transactions is refused.
    p = txn_producer(sasl, "tx-a")
    with pytest.raises(KafkaException) as e:
        p.init_transactions(TXN_CALL_S)
    err = kafka_error(e)
    assert err.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, \
        f"librdkafka init_transactions without WRITE on TRANSACTIONAL_ID tx-a: want " \
        f"TRANSACTIONAL_ID_AUTHORIZATION_FAILED, got {err}"
    assert err.fatal(), f"a transactional id authorization failure is fatal for librdkafka: {err}"
    with pytest.raises(KafkaException):
        p.begin_transaction()
    kp = kp_producer(sasl, transactional_id="tx-a", security_protocol="SASL_PLAINTEXT",
                     sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="alice", sasl_plain_password="alice-pw")
    try:
        with pytest.raises(kafka.errors.TransactionalIdAuthorizationFailedError):
            kp.init_transactions()
    finally:
        kp.close(timeout=5)
    assert end_offsets(broker, topic_name, 2) == [0, 0], "nothing may have been written"

    # WRITE on TRANSACTIONAL_ID tx-a: the same principal can now use it.
    grant_transactional_id(broker, "User:alice", "tx-a")
    p = txn_producer(sasl, "tx-a")
    p.init_transactions(TXN_CALL_S)
    p.begin_transaction()
    for i in range(4):
        p.produce(topic_name, value=b"committed-%d" % i, partition=i % 2)
    p.commit_transaction(TXN_CALL_S)
    assert sorted(read_committed(broker, topic_name, 2, 4)) == [b"committed-%d" % i for i in range(4)]

    # A LITERAL ACL names that one id only.
    other = txn_producer(sasl, "tx-b")
    with pytest.raises(KafkaException) as e:
        other.init_transactions(TXN_CALL_S)
    assert kafka_error(e).code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, kafka_error(e)

    # A topic alice may only DESCRIBE: its partition cannot join the transaction (AddPartitionsToTxn
    # answers TOPIC_AUTHORIZATION_FAILED), so the transaction can only be aborted — the records it
    # had already written are never visible to read_committed — and the next transaction commits.
    p.begin_transaction()
    p.produce(topic_name, value=b"aborted", partition=0)
    assert p.flush(TXN_CALL_S) == 0
    p.produce(topic_name + "-ro", value=b"refused", partition=0)
    with pytest.raises(KafkaException) as e:
        p.commit_transaction(TXN_CALL_S)
    err = kafka_error(e)
    assert err.txn_requires_abort() and not err.fatal(), \
        f"writing to a topic without WRITE inside a transaction: want an abortable error, got {err}"
    assert err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err
    p.abort_transaction(TXN_CALL_S)
    p.begin_transaction()
    p.produce(topic_name, value=b"after", partition=1)
    p.commit_transaction(TXN_CALL_S)
    got = read_committed(broker, topic_name, 2, 5)
    assert sorted(got) == sorted([b"committed-%d" % i for i in range(4)] + [b"after"]), \
        f"read_committed must show the committed transactions only: {got}"
    assert end_offsets(broker, topic_name, 2) == [5, 5], \
        "each partition: 2 committed records + marker, then 1 record (aborted / committed) + marker"
    assert end_offsets(broker, topic_name + "-ro", 1) == [0], "the refused record must not be written"
    broker.check_alive()


@pytest.mark.timeout(60)
def test_send_offsets_to_transaction_needs_read_on_the_group(broker_factory, topic_name):
    broker = broker_factory(settings=SETTINGS, cores=2)
    sasl = setup(broker, "alice")
    rd_create_topic(broker.bootstrap, topic_name, 1)
    acl_add(broker, "--principal", "User:alice", "--operation", "write,read", "--topic", topic_name)
    acl_add(broker, "--principal", "User:alice", "--operation", "read", "--group", "alice-", "--prefixed")
    grant_transactional_id(broker, "User:alice", "tx-a")
    p = txn_producer(sasl, "tx-a")
    p.init_transactions(TXN_CALL_S)

    def group_metadata(group: str):
        # Only the group id matters here; this consumer never joins (it is not polled).
        c = rd_consumer(sasl, **{"group.id": group}, **login("alice"))
        try:
            return c.consumer_group_metadata()
        finally:
            c.close()

    offsets = [TopicPartition(topic_name, 0, 3)]

    # A group alice may not READ: refused, abortable; the application aborts and carries on.
    p.begin_transaction()
    p.produce(topic_name, value=b"aborted", partition=0)
    with pytest.raises(KafkaException) as e:
        p.send_offsets_to_transaction(offsets, group_metadata("other-group"), TXN_CALL_S)
    err = kafka_error(e)
    assert err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, \
        f"send_offsets_to_transaction for a group without READ: want GROUP_AUTHORIZATION_FAILED, got {err}"
    assert err.txn_requires_abort() and not err.fatal(), f"want an abortable error, got {err}"
    p.abort_transaction(TXN_CALL_S)

    # A group alice may READ: the offsets are committed with the transaction.
    p.begin_transaction()
    p.produce(topic_name, value=b"committed", partition=0)
    p.send_offsets_to_transaction(offsets, group_metadata("alice-app"), TXN_CALL_S)
    p.commit_transaction(TXN_CALL_S)

    def committed(group: str) -> int:
        c = rd_consumer(broker.bootstrap, **{"group.id": group})
        try:
            return c.committed([TopicPartition(topic_name, 0)], timeout=10)[0].offset
        finally:
            c.close()

    assert committed("alice-app") == 3, "the offsets sent with the committed transaction are the group's"
    assert committed("other-group") == confluent_kafka.OFFSET_INVALID, \
        "the refused group must not have a committed offset"
    assert read_committed(broker, topic_name, 1, 1) == [b"committed"]

    # Offsets of a topic alice may not READ (only WRITE): TxnOffsetCommit refuses them with
    # TOPIC_AUTHORIZATION_FAILED, as a plain OffsetCommit does; the group gets no offset.
    write_only = f"{topic_name}-wo"
    rd_create_topic(broker.bootstrap, write_only, 1)
    acl_add(broker, "--principal", "User:alice", "--operation", "write", "--topic", write_only)
    p.begin_transaction()
    p.produce(topic_name, value=b"aborted too", partition=0)
    with pytest.raises(KafkaException) as e:
        p.send_offsets_to_transaction([TopicPartition(write_only, 0, 2)], group_metadata("alice-wo"),
                                      TXN_CALL_S)
    assert kafka_error(e).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, \
        f"offsets of a topic without READ: want TOPIC_AUTHORIZATION_FAILED, got {kafka_error(e)}"
    p.abort_transaction(TXN_CALL_S)
    c = rd_consumer(broker.bootstrap, **{"group.id": "alice-wo"})
    try:
        assert c.committed([TopicPartition(write_only, 0)], timeout=10)[0].offset == confluent_kafka.OFFSET_INVALID
    finally:
        c.close()
    broker.check_alive()


def test_transactions_and_topic_partitions_are_described_only_to_who_may(broker_factory, topic_name):
    """Issue 35 item 4: with the authorizer on, a principal with no ACLs saw every transaction
    (ListTransactions, DescribeTransactions: another's transactional id, producer id, epoch,
    timeout and partitions) and every topic in DescribeTopicPartitions (name, error 29 and the
    real topic id). Now, as Kafka: transactions need DESCRIBE on their TRANSACTIONAL_ID, and
    DescribeTopicPartitions leaves out of "all topics" what the principal may not DESCRIBE and
    answers a named one TOPIC_AUTHORIZATION_FAILED without its id (as Metadata does)."""
    broker = broker_factory(settings=SETTINGS, cores=2)
    sasl = setup(broker, "alice")
    secret, public = topic_name + "-secret", topic_name + "-public"
    rd_create_topic(broker.bootstrap, secret, 1)
    rd_create_topic(broker.bootstrap, public, 1)
    acl_add(broker, "--principal", "User:alice", "--operation", "describe", "--topic", public)
    # The super user (PLAINTEXT, ANONYMOUS) runs a transaction on the secret topic.
    p = rd_producer(broker.bootstrap, acks="all", **{"transactional.id": "tx-secret", "enable.idempotence": True})
    p.init_transactions(TXN_CALL_S)
    p.begin_transaction()
    p.produce(secret, value=b"s", partition=0)
    p.commit_transaction(TXN_CALL_S)

    def alice_admin():
        return kafka.KafkaAdminClient(bootstrap_servers=sasl, security_protocol="SASL_PLAINTEXT",
                                      sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="alice",
                                      sasl_plain_password="alice-pw", request_timeout_ms=10000)

    admin = alice_admin()
    try:
        listed = admin.list_transactions()
        assert "tx-secret" not in repr(listed), f"alice may not see tx-secret: {listed}"
        with pytest.raises(kafka.errors.TransactionalIdAuthorizationFailedError):
            admin.describe_transactions(["tx-secret"])
        named = admin.describe_topic_partitions([secret, public])
        by_name = {t["name"]: t for t in named["topics"]}
        assert by_name[secret]["error_code"] == 29, by_name[secret]
        assert not by_name[secret]["partitions"], by_name[secret]
        leaked = by_name[secret]["topic_id"]
        assert leaked is None or str(leaked).strip("0-") == "", f"the secret topic's id leaked: {by_name[secret]}"
        assert by_name[public]["error_code"] == 0 and by_name[public]["partitions"], by_name[public]
        every = admin.describe_topic_partitions([])
        assert [t["name"] for t in every["topics"]] == [public], every
    finally:
        admin.close()
    # DESCRIBE on the transactional id: now alice sees it.
    acl_add(broker, "--principal", "User:alice", "--operation", "describe", "--transactional-id", "tx-secret")
    admin = alice_admin()
    try:
        assert "tx-secret" in repr(admin.list_transactions())
        assert "tx-secret" in repr(admin.describe_transactions(["tx-secret"]))
    finally:
        admin.close()
