"""Older clients: the request versions Kafka 4 dropped (KIP-896) and Kafka 3.9 still served,
sent by a real client, against the real weir binary (docs/protocol.md, "Older clients").

sarama (tests/go/sarama_scenarios, `old` subcommand) sends them the way its users get them —
`Config.Version` set to an old Kafka, or a request built at an old version:
- CreateTopics v0 (a topic with a config, then the same topic again: TOPIC_ALREADY_EXISTS)
  and v1 (validate_only creates nothing; a partition count of 0 is refused with a message);
- DescribeConfigs v0: the topic's own `retention.ms` is not default, an unset one is;
- ListOffsets v0: the newest and oldest offsets of a partition holding 5 records, and of an
  empty one;
- OffsetCommit v0 and v1 and OffsetFetch v0 and v1: what each commits, every version reads
  back, and so does a current client;
- DeleteTopics v0: the topic is gone for a current client.

And under ACLs (SASL/PLAIN): a user without DESCRIBE on a topic gets TOPIC_AUTHORIZATION_FAILED
from ListOffsets v0 and no offsets listed; with the ACL, the offset.

Before these versions were served, weir closed the connection on each of them, as Kafka 4
does, and sarama reported "EOF" or ran out of brokers.
"""

from __future__ import annotations

import pytest

from clients import Msg, rd_create_topic, rd_produce, rd_producer
from test_acls import SETTINGS as ACL_SETTINGS, acl_add, setup
from test_sarama_scenarios import GO_BUILD_TIMEOUT_S, run, sarama_scenarios  # noqa: F401 (a fixture)


@pytest.mark.timeout(GO_BUILD_TIMEOUT_S + 120)
def test_sarama_in_old_modes_creates_describes_lists_commits_and_deletes(sarama_scenarios, broker,
                                                                          topic_name):
    group = f"{topic_name}-group"
    r = run(sarama_scenarios, "old", "-brokers", broker.bootstrap, "-topic", topic_name, "-group", group)

    # CreateTopics v0 and v1.
    assert r["create_v0"] == "", r
    assert "already exists" in r["create_v0_again"], r
    assert r["create_v1_validate_only"] == "", r
    assert r["validated_topic_exists"] is False, "validate_only created the topic"
    assert "Number of partitions is invalid" in r["create_v1_bad"], r
    assert "invalid partition count 0" in r["create_v1_bad"], "v1 carries the broker's message"

    # DescribeConfigs v0: is_default instead of a source.
    configs = r["describe_v0"]
    assert configs["retention.ms"] == {"value": "3600000", "default": False, "read_only": False}, configs
    assert configs["cleanup.policy"]["value"] == "delete"
    assert configs["cleanup.policy"]["default"] is True, configs["cleanup.policy"]

    # ListOffsets v0.
    assert (r["list_v0_newest"], r["list_v0_newest_error"]) == (5, ""), r
    assert (r["list_v0_oldest"], r["list_v0_oldest_error"]) == (0, ""), r
    assert (r["list_v0_empty_partition"], r["list_v0_empty_partition_error"]) == (0, ""), r

    # OffsetCommit v0 (partition 0 at 2) and v1 (partition 1 at 3), read back by each
    # OffsetFetch version and by a current one.
    assert r["commit"] == {"v0": 0, "v1": 0}, r
    want = {"0": {"offset": 2, "metadata": "meta-v0", "error": 0},
            "1": {"offset": 3, "metadata": "meta-v1", "error": 0}}
    assert r["fetch"] == {"v0": want, "v1": want}, r["fetch"]
    assert r["fetch_current"] == {"0": 2, "1": 3}, r

    # DeleteTopics v0.
    assert r["delete_v0"] == "", r
    assert r["deleted"] is True, r


TOPIC_AUTHORIZATION_FAILED = 29


@pytest.mark.timeout(GO_BUILD_TIMEOUT_S + 60)
def test_list_offsets_v0_under_acls_lists_nothing_to_a_user_without_describe(sarama_scenarios, broker_factory,
                                                                              topic_name):
    b = broker_factory(settings=ACL_SETTINGS)
    rd_create_topic(b.bootstrap, topic_name, 1)
    rd_produce(rd_producer(b.bootstrap), topic_name, [Msg(None, b"x%d" % i, partition=0) for i in range(3)])
    sasl = setup(b, "alice")

    def list_v0() -> dict:
        return run(sarama_scenarios, "list0", "-brokers", sasl, "-topic", topic_name,
                   "-user", "alice", "-password", "alice-pw")

    denied = list_v0()
    assert denied["code"] == TOPIC_AUTHORIZATION_FAILED, denied
    assert not denied["offsets"], f"offsets listed to a user who may not describe the topic: {denied}"
    acl_add(b, "--principal", "User:alice", "--operation", "describe", "--topic", topic_name)
    allowed = list_v0()
    assert (allowed["code"], allowed["offsets"]) == (0, [3]), allowed
