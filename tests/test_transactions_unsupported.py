"""Until weir has transactions, a transactional producer is told so — not sent to check ACLs.

What broke: InitProducerId with a transactional.id was answered with
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, an authorization error, and FindCoordinator(TRANSACTION)
with COORDINATOR_NOT_AVAILABLE. Both now say UNSUPPORTED_VERSION with the message "weir does
not support transactions yet" (fatal at once for the Java client; librdkafka keeps retrying
its coordinator query until its own timeout, logging the broker's message each time). The
broker and idempotent producers are unaffected.
"""

from __future__ import annotations

import logging

import kafka
import kafka.errors
import pytest
from confluent_kafka import KafkaException

from clients import Msg, rd_consume, rd_create_topic, rd_produce, rd_producer


class Capture(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def test_transactional_producer_is_told_transactions_are_unsupported(broker, topic_name):
    rd_create_topic(broker.bootstrap, topic_name, 1)
    log = logging.getLogger(f"txn-{topic_name}")
    log.setLevel(logging.DEBUG)
    cap = Capture()
    log.addHandler(cap)
    p = rd_producer(broker.bootstrap, **{"transactional.id": f"{topic_name}-tx", "debug": "eos",
                                         "enable.idempotence": True, "logger": log})
    with pytest.raises(KafkaException) as e:
        p.init_transactions(5)
    assert "AUTHORIZATION" not in str(e.value).upper()
    p.poll(0.5)  # delivers librdkafka's queued log lines to the Python logger
    said = [line for line in cap.lines if "does not support transactions" in line]
    assert said, "the broker's reason never reached the client:\n" + "\n".join(cap.lines[-20:])
    assert not [line for line in cap.lines if "AUTHORIZATION" in line.upper()]

    # kafka-python fails at once, naming the error.
    kp = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=f"{topic_name}-kp",
                             max_block_ms=10000)
    try:
        with pytest.raises(kafka.errors.KafkaError) as e:
            kp.init_transactions()
        assert "UnsupportedVersion" in str(e.value) and "Authorization" not in str(e.value), str(e.value)
    finally:
        kp.close(timeout=5)

    # Idempotent (non-transactional) producers still get producer ids and write.
    ip = rd_producer(broker.bootstrap, **{"enable.idempotence": True})
    rd_produce(ip, topic_name, [Msg(key=None, value=b"v%d" % i) for i in range(10)])
    assert len(rd_consume(broker.bootstrap, topic_name, [0], 10)) == 10
