"""A Fetch response's `max_bytes` (librdkafka's `fetch.max.bytes`) bounds the whole response.

What broke: every owner core filled up to `max_bytes` on its own, so a fetch of partitions on
two cores came back with up to twice the limit — and librdkafka refuses a response larger than
its `receive.message.max.bytes`. Now the gathered replies are trimmed in request order to whole
batches within the limit (only the first batch of the first non-empty partition may exceed it,
as in Kafka), and a consumer still reads everything.
"""

from __future__ import annotations

import kafka_wire as kw
from clients import Msg, rd_consume, rd_create_topic, rd_produce, rd_producer

PARTITIONS = 4


def test_fetch_max_bytes_is_per_response_not_per_core(broker_factory, topic_name):
    broker = broker_factory(cores=2)
    rd_create_topic(broker.bootstrap, topic_name, PARTITIONS)
    # ~200 KB per partition in ~16 KB batches.
    msgs = [Msg(key=None, value=bytes([65 + i % 26]) * 1000, partition=i % PARTITIONS) for i in range(800)]
    rd_produce(rd_producer(broker.bootstrap, **{"batch.size": 16384, "linger.ms": 20}), topic_name, msgs)

    limit = 100_000
    sock = kw.connect(broker.bootstrap)
    try:
        sock.sendall(kw.fetch(7, topic_name, [(p, 0) for p in range(PARTITIONS)], max_wait_ms=0,
                              max_bytes=limit))
        cid, body = kw.read_response(sock)
    finally:
        sock.close()
    assert cid == 7
    parts = kw.parse_fetch_v4(body)
    assert [p["error"] for p in parts] == [0] * PARTITIONS
    sizes = [p["records_size"] for p in parts]
    assert 0 < sum(sizes) <= limit, f"record bytes per partition {sizes}: over the {limit}-byte limit"
    assert sizes[0] > 0, "partitions fill in request order"
    assert sum(sizes) > limit // 2, f"{sizes}: the response should be filled close to the limit"

    # librdkafka with a small fetch.max.bytes and receive.message.max.bytes reads it all.
    got = rd_consume(broker.bootstrap, topic_name, range(PARTITIONS), len(msgs),
                     **{"fetch.max.bytes": limit, "message.max.bytes": limit, "receive.message.max.bytes": limit + 1000,
                        "max.partition.fetch.bytes": limit})
    assert sorted(r.value for r in got) == sorted(m.value for m in msgs)
