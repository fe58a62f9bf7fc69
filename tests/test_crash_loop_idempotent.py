"""Crash loop with an idempotent producer that lives across the kills.

One confluent-kafka producer (enable.idempotence=true, acks=all, 5 requests in flight, retries
until delivered) writes a numbered sequence to each of 4 partitions while the broker is killed
(SIGKILL) and restarted on the same fixed port, again and again. librdkafka resends every
batch whose answer it lost; a batch the broker had already written must not be written again.
At the end every record must have been delivered, and each partition must hold its sequence
exactly once, in order: no duplicate, no gap, no reorder.

Before weir checked producer sequences, each resent batch was appended again (duplicates).
CI runs WEIR_IDEMPOTENT_CYCLES (default 30) kills; long mode e.g. WEIR_IDEMPOTENT_CYCLES=200.
"""

from __future__ import annotations

import os
import random
import threading
import time

import pytest
from confluent_kafka import TopicPartition

from clients import rd_consumer, rd_create_topic, rd_producer

PARTITIONS = 4
CYCLES = int(os.environ.get("WEIR_IDEMPOTENT_CYCLES", "30"))


@pytest.mark.timeout(120 + CYCLES * 6)
def test_idempotent_producer_is_exactly_once_across_kills(broker_factory, topic_name):
    seed = int(os.environ.get("WEIR_CRASH_SEED", random.randrange(1 << 32)))
    rng = random.Random(seed)
    print(f"idempotent crash loop: seed {seed}, {CYCLES} kills")
    broker = broker_factory(cores=2, fixed_port=True)
    rd_create_topic(broker.bootstrap, topic_name, PARTITIONS)
    producer = rd_producer(broker.bootstrap, acks="all", **{
        "enable.idempotence": True, "max.in.flight.requests.per.connection": 5,
        "message.timeout.ms": 300000, "linger.ms": 2, "batch.num.messages": 40,
        "reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 200, "retry.backoff.ms": 20})
    errors: list[str] = []
    delivered = [0] * PARTITIONS
    next_seq = [0] * PARTITIONS
    stop = threading.Event()

    def on_delivery(err, msg):
        if err is not None:
            errors.append(f"{msg.partition()}: {err}")
        else:
            delivered[msg.partition()] += 1

    def run():
        i = 0
        while not stop.is_set():
            p = i % PARTITIONS
            try:
                producer.produce(topic_name, value=f"{p}:{next_seq[p]}".encode(), partition=p,
                                 on_delivery=on_delivery)
                next_seq[p] += 1
                i += 1
            except BufferError:
                producer.poll(0.05)
                continue
            if i % 50 == 0:
                producer.poll(0)
                time.sleep(0.005)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    try:
        for cycle in range(1, CYCLES + 1):
            time.sleep(rng.uniform(0.2, 1.2))
            broker.check_alive()
            broker.kill9()  # SIGKILL, then start again on the same port and data
            assert not errors, f"cycle {cycle}: delivery errors {errors[:5]}"
    finally:
        stop.set()
        t.join(10)
    left = producer.flush(120)
    assert left == 0, f"{left} records never delivered"
    assert not errors, f"delivery errors: {errors[:5]}"
    assert delivered == next_seq, f"delivered {delivered}, produced {next_seq}"

    c = rd_consumer(broker.bootstrap, **{"fetch.wait.max.ms": 50})
    try:
        for p in range(PARTITIONS):
            lo, hi = c.get_watermark_offsets(TopicPartition(topic_name, p), timeout=10, cached=False)
            assert (lo, hi) == (0, next_seq[p]), \
                f"partition {p}: log holds [{lo}, {hi}), the producer sent {next_seq[p]} records once each"
        c.assign([TopicPartition(topic_name, p, 0) for p in range(PARTITIONS)])
        seen = [[] for _ in range(PARTITIONS)]
        deadline = time.monotonic() + 120
        while sum(map(len, seen)) < sum(next_seq):
            assert time.monotonic() < deadline, f"read {list(map(len, seen))} of {next_seq}"
            msg = c.poll(0.5)
            if msg is None or msg.error():
                continue
            seen[msg.partition()].append(msg.value())
    finally:
        c.close()
    for p in range(PARTITIONS):
        want = [f"{p}:{i}".encode() for i in range(next_seq[p])]
        assert seen[p] == want, f"partition {p}: first difference at " \
            f"{next((i for i, (a, b) in enumerate(zip(seen[p], want)) if a != b), min(len(seen[p]), len(want)))}"
    print(f"idempotent crash loop done: seed {seed}, {CYCLES} kills, {sum(next_seq)} records, "
          f"each exactly once and in order")
