"""Long polling: a fetch parked at the log end is answered as soon as data lands, and an idle one
after its max wait — never busy-polling, never hanging.

What a user notices: with fetch.wait.max.ms=5000 a tailing consumer still gets a new record
within milliseconds of its produce (we allow 1.5 s), and an idle poll(timeout) comes back empty
after about `timeout`.
"""

from __future__ import annotations

import time

import kafka
from confluent_kafka import TopicPartition

import kafka_wire as wire
from clients import Msg, kp_consumer, kp_produce, kp_producer, rd_consumer, rd_create_topic, rd_produce, rd_producer

DELIVERY_LIMIT_S = 1.5


def test_librdkafka_parked_consumer_gets_new_record_fast(broker, topic_name):
    rd_create_topic(broker.bootstrap, topic_name, 1)
    producer = rd_producer(broker.bootstrap, acks="1", **{"linger.ms": 0})
    rd_produce(producer, topic_name, [Msg(None, b"first", (), None, 0)])
    c = rd_consumer(broker.bootstrap, **{"fetch.wait.max.ms": 5000, "fetch.min.bytes": 1})
    try:
        c.assign([TopicPartition(topic_name, 0, 1)])  # at the log end
        for round_ in range(3):
            # An idle poll returns empty after about its timeout.
            t = time.monotonic()
            msg = c.poll(1.5)
            idle = time.monotonic() - t
            assert msg is None, f"round {round_}: idle poll returned {msg.error() or msg.value()}"
            assert 1.4 <= idle <= 2.0, f"round {round_}: idle poll(1.5) took {idle:.2f}s"

            # The consumer's fetch is parked now; a produce must wake it.
            value = f"tail-{round_}".encode()
            sent = time.monotonic()
            rd_produce(producer, topic_name, [Msg(None, value, (), None, 0)])
            msg = c.poll(6.0)
            latency = time.monotonic() - sent
            assert msg is not None and msg.error() is None, f"round {round_}: nothing within 6 s ({msg and msg.error()})"
            assert (msg.offset(), msg.value()) == (1 + round_, value)
            assert latency < DELIVERY_LIMIT_S, (
                f"round {round_}: parked consumer got the record {latency:.2f}s after produce "
                f"(fetch.wait.max.ms=5000; want < {DELIVERY_LIMIT_S}s)")
    finally:
        c.close()


def test_kafka_python_parked_consumer_gets_new_record_fast(broker, topic_name):
    rd_create_topic(broker.bootstrap, topic_name, 1)
    producer = kp_producer(broker.bootstrap, acks=1, linger_ms=0, enable_idempotence=False)
    c = kp_consumer(broker.bootstrap, fetch_max_wait_ms=5000, request_timeout_ms=30000)
    try:
        tp = kafka.TopicPartition(topic_name, 0)
        c.assign([tp])
        c.seek(tp, 0)
        for round_ in range(3):
            t = time.monotonic()
            got = c.poll(timeout_ms=1500)
            idle = time.monotonic() - t
            assert not any(got.values()), f"round {round_}: idle poll returned {got}"
            assert 1.4 <= idle <= 2.0, f"round {round_}: idle poll(1500 ms) took {idle:.2f}s"

            value = f"tail-{round_}".encode()
            sent = time.monotonic()
            kp_produce(producer, topic_name, [Msg(None, value, (), None, 0)])
            recs = []
            while not recs and time.monotonic() - sent < 6.0:
                for rs in c.poll(timeout_ms=200).values():
                    recs.extend(rs)
            latency = time.monotonic() - sent
            assert [(r.offset, r.value) for r in recs] == [(round_, value)], f"round {round_}: got {recs}"
            assert latency < DELIVERY_LIMIT_S, (
                f"round {round_}: parked consumer got the record {latency:.2f}s after produce "
                f"(fetch_max_wait_ms=5000; want < {DELIVERY_LIMIT_S}s)")
    finally:
        c.close()
        producer.close(timeout=10)


def test_fetch_at_log_end_waits_max_wait(broker, topic_name):
    """An idle fetch is answered (empty, no error) after max_wait_ms: not at once, not late."""
    rd_create_topic(broker.bootstrap, topic_name, 1)
    rd_produce(rd_producer(broker.bootstrap), topic_name, [Msg(None, b"x", (), None, 0)])
    with wire.connect(broker.bootstrap) as s:
        for corr, max_wait_ms in enumerate([1000, 200, 2000], start=1):
            t = time.monotonic()
            s.sendall(wire.fetch(corr, topic_name, 0, 1, max_wait_ms=max_wait_ms))
            got_corr, body = wire.read_response(s, timeout=max_wait_ms / 1000 + 5)
            waited = time.monotonic() - t
            assert got_corr == corr
            [part] = wire.parse_fetch_v4(body)
            assert (part["error"], part["high_watermark"], part["records_size"]) == (0, 1, 0), part
            assert max_wait_ms / 1000 * 0.9 <= waited <= max_wait_ms / 1000 + 0.5, (
                f"fetch with max_wait_ms={max_wait_ms} at the log end answered after {waited:.3f}s")


def test_parked_fetches_wake_on_append(broker, topic_name):
    """Fifty connections park a fetch at the log end (max_wait 5 s), on a topic whose partitions
    are spread over the cores, each fetch naming every partition. One produce to one partition
    answers all of them at once."""
    partitions = 4
    rd_create_topic(broker.bootstrap, topic_name, partitions)
    socks = [wire.connect(broker.bootstrap) for _ in range(50)]
    try:
        for target in range(partitions):
            t_park = time.monotonic()
            for i, s in enumerate(socks):
                s.sendall(wire.fetch(i, topic_name, [(p, 1 if p < target else 0) for p in range(partitions)],
                                     max_wait_ms=5000))
            time.sleep(0.5)
            sent = time.monotonic()
            rd_produce(rd_producer(broker.bootstrap, acks="1"), topic_name, [Msg(None, b"wake", (), None, target)])
            for i, s in enumerate(socks):
                corr, body = wire.read_response(s, timeout=10)
                latency = time.monotonic() - sent
                assert corr == i
                parts = {p["partition"]: p for p in wire.parse_fetch_v4(body)}
                assert parts[target]["records_size"] > 0, f"connection {i}: no records for partition {target}: {parts}"
                assert time.monotonic() - t_park >= 0.45, f"connection {i}: fetch answered before any data arrived"
                assert latency < DELIVERY_LIMIT_S, (
                    f"connection {i}: parked fetch answered {latency:.2f}s after the produce to partition {target}")
    finally:
        for s in socks:
            s.close()
