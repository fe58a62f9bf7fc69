"""Upgrading one broker from the previous release to the build under test, in place
(docs/operations.md, "Upgrade"). A long mode: `WEIR_UPGRADE=1` (building the previous release
takes several minutes, tests/previous_release.py); the cluster's rolling upgrade is
test_cluster_rolling_restart.py's `upgrade` mode, under the same variable.

The previous release writes a data directory with every kind of state a user has — records
of several partitions and of a compacted topic, an idempotent producer's sequence, committed
group offsets, a committed and an aborted transaction, topic configs — and is stopped with
SIGTERM, or killed with SIGKILL mid-write; the build under test starts on that directory
and must serve all of it: the same records at the same offsets, the offsets committed, only
the committed transaction to a read_committed consumer, the configs, and the idempotent
producer's next batch accepted in sequence.
"""

from __future__ import annotations

import os
import signal
from dataclasses import replace

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from clients import (CLIENT_TIMEOUT_S, assert_exact, rd_conf, rd_consume, rd_create_topic, rd_produce,
                     rd_producer, rd_topic_configs, sample_messages)
from conftest import WEIR_BIN, free_port_run
from previous_release import BUILD_TIMEOUT_S, previous_binary

UPGRADE = os.environ.get("WEIR_UPGRADE") == "1"
GROUP = "upgrade-group"


def committed(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    c = Consumer(rd_conf(bootstrap, **{"group.id": GROUP}))
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=CLIENT_TIMEOUT_S)
    finally:
        c.close()
    return {tp.partition: tp.offset for tp in got}


# Collected only in the long mode (as test_franz_go_suite's cluster run).
if UPGRADE:
    @pytest.mark.timeout(BUILD_TIMEOUT_S + 300)
    @pytest.mark.parametrize("stop", ["sigterm", "sigkill"])
    def test_a_broker_upgraded_in_place_serves_what_the_previous_release_wrote(broker_factory, topic_name, stop):
        previous, commit = previous_binary()
        print(f"\nupgrading from the previous release {commit} ({previous}) to {WEIR_BIN}")
        # Fixed ports (the bootstrap and each core's), so the producer finds the broker again
        # after the restart, as a client of a real service does.
        port = free_port_run(3)
        b = broker_factory(settings={"listeners": f"PLAINTEXT://127.0.0.1:{port}"}, cores=2)
        b.stop()
        b.binary = previous
        b.start()
        data, compacted, txn_topic = topic_name, f"{topic_name}-compacted", f"{topic_name}-txn"
        rd_create_topic(b.bootstrap, data, 4, config={"retention.ms": "604800000"})
        rd_create_topic(b.bootstrap, compacted, 1, config={"cleanup.policy": "compact"})
        rd_create_topic(b.bootstrap, txn_topic, 1)

        sent = sample_messages(400, 4)
        idem = rd_producer(b.bootstrap, **{"enable.idempotence": True})
        rd_produce(idem, data, sent)
        keyed = [replace(m, key=f"k{i % 5}".encode(), partition=0) for i, m in enumerate(sample_messages(50, 1))]
        rd_produce(rd_producer(b.bootstrap), compacted, keyed)
        c = Consumer(rd_conf(b.bootstrap, **{"group.id": GROUP, "enable.auto.commit": False}))
        c.commit(offsets=[TopicPartition(data, p, 10 + p) for p in range(4)], asynchronous=False)
        c.close()
        tp = Producer(rd_conf(b.bootstrap, **{"transactional.id": f"{topic_name}-tx"}))
        tp.init_transactions(CLIENT_TIMEOUT_S)
        for outcome, value in (("commit", b"committed"), ("abort", b"aborted")):
            tp.begin_transaction()
            tp.produce(txn_topic, value=value, partition=0)
            tp.flush(CLIENT_TIMEOUT_S)
            (tp.commit_transaction if outcome == "commit" else tp.abort_transaction)(CLIENT_TIMEOUT_S)

        if stop == "sigkill":
            b.check_alive()
            b._kill()  # SIGKILL, no restart: the next start is the new binary's
        else:
            b.stop(sig=signal.SIGTERM)
        b.binary = WEIR_BIN
        b.start()

        got = rd_consume(b.bootstrap, data, range(4), len(sent))
        assert_exact(sent, got)
        assert committed(b.bootstrap, data, 4) == {p: 10 + p for p in range(4)}
        assert rd_topic_configs(b.bootstrap, data)["retention.ms"] == "604800000"
        assert rd_topic_configs(b.bootstrap, compacted)["cleanup.policy"] == "compact"
        assert [r.value for r in rd_consume(b.bootstrap, compacted, [0], len(keyed))] == [m.value for m in keyed]
        visible = rd_consume(b.bootstrap, txn_topic, [0], 1, **{"isolation.level": "read_committed"})
        assert [r.value for r in visible] == [b"committed"]
        # The idempotent producer of the previous release goes on against the new one: its
        # next records are accepted in sequence and land after the old ones.
        more = sample_messages(40, 4)
        rd_produce(idem, data, more)
        assert_exact(sent + more, rd_consume(b.bootstrap, data, range(4), len(sent) + len(more)))
