"""Load: hundreds of concurrent connections producing and consuming at once.

100 librdkafka producers (acks=1 and acks=all, alternating) and 100 consumers (each assigned
one partition of an 8-partition topic, from the beginning) — about 400 TCP connections, since
each client keeps a bootstrap and a broker connection — run for WEIR_LOAD_SECONDS (default
20 s; ~60 s for the long form). Every delivery must succeed, every consumer must see its
partition's acknowledged records, nothing may error, and the broker's peak RSS (sampled
every 0.5 s) is printed and must stay bounded.
"""

from __future__ import annotations

import os
import time

import pytest
from confluent_kafka import TopicPartition

from clients import rd_consumer, rd_create_topic, rd_producer

PRODUCERS = 100
CONSUMERS = 100
PARTITIONS = 8
SECONDS = float(os.environ.get("WEIR_LOAD_SECONDS", "20"))


@pytest.mark.timeout(int(SECONDS) + 150)
def test_hundreds_of_connections(broker, topic_name):
    rd_create_topic(broker.bootstrap, topic_name, PARTITIONS)
    errors: list = []
    acked = [0] * PARTITIONS

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)
        else:
            acked[msg.partition()] += 1

    producers = [rd_producer(broker.bootstrap, acks="1" if i % 2 else "all", **{"linger.ms": 20})
                 for i in range(PRODUCERS)]
    consumers = []
    for i in range(CONSUMERS):
        c = rd_consumer(broker.bootstrap, **{"fetch.wait.max.ms": 200})
        c.assign([TopicPartition(topic_name, i % PARTITIONS, 0)])
        consumers.append(c)
    seen = [0] * CONSUMERS
    base_rss = broker.rss_bytes()
    peak = base_rss
    t0 = time.monotonic()
    last_sample = 0.0
    n = 0
    try:
        while time.monotonic() - t0 < SECONDS:
            for i, p in enumerate(producers):
                p.produce(topic_name, value=b"load-%d-%d" % (i, n) * 8, partition=(i + n) % PARTITIONS,
                          on_delivery=on_delivery)
                p.poll(0)
            n += 1
            for i, c in enumerate(consumers):
                for m in c.consume(num_messages=500, timeout=0):
                    if m.error() is not None:
                        errors.append(m.error())
                    else:
                        seen[i] += 1
            if time.monotonic() - last_sample > 0.5:
                last_sample = time.monotonic()
                peak = max(peak, broker.rss_bytes())
                broker.check_alive()
        for p in producers:
            assert p.flush(30) == 0, "undelivered records after the run"
        total = sum(acked)
        # Drain: every consumer reaches its partition's acknowledged count.
        deadline = time.monotonic() + 60
        while any(seen[i] < acked[i % PARTITIONS] for i in range(CONSUMERS)):
            assert time.monotonic() < deadline, f"consumers behind: {seen} of {acked}"
            for i, c in enumerate(consumers):
                for m in c.consume(num_messages=1000, timeout=0):
                    if m.error() is not None:
                        errors.append(m.error())
                    else:
                        seen[i] += 1
            peak = max(peak, broker.rss_bytes())
        assert not errors, f"{len(errors)} errors, first {errors[0]}"
        assert all(seen[i] == acked[i % PARTITIONS] for i in range(CONSUMERS)), (seen, acked)
    finally:
        for c in consumers:
            c.close()
    elapsed = time.monotonic() - t0
    print(f"load: {PRODUCERS} producers + {CONSUMERS} consumers for {SECONDS:.0f}s: {total} records acked, "
          f"{sum(seen)} consumed, 0 errors; RSS {base_rss >> 20} MiB -> peak {peak >> 20} MiB ({elapsed:.0f}s)")
    assert peak < 1 << 30, f"peak RSS {peak >> 20} MiB"
    broker.check_alive()
