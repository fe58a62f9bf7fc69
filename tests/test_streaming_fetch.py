"""Streaming fetch (docs/streaming-fetch.md) over a raw socket, from outside the Rust client:
a consumer that stops reading its socket gets at most its credit of records pushed; a
malformed StreamFetch closes only its own connection; and Kafka clients are not offered
the extension (ApiVersions v0 from a raw socket, and librdkafka's view through a normal
produce/consume round trip on the same broker)."""

from __future__ import annotations

import struct
import time

from clients import rd_consume, rd_create_topic, rd_produce, rd_producer, sample_messages
from kafka_wire import Closed, connect, frame, ping, read_response, string

API_STREAM_FETCH = 32000


def open_stream(corr: int, stream_id: int, topic: str, credit: int, max_push: int, deadline_ms: int) -> bytes:
    body = struct.pack(">biiiii", 0, stream_id, credit, max_push, deadline_ms, 1)
    body += string(topic) + struct.pack(">iq", 0, 0)
    return frame(API_STREAM_FETCH, 0, corr, body)


def test_a_consumer_that_stops_reading_gets_at_most_its_credit(broker, topic_name):
    rd_create_topic(broker.bootstrap, topic_name, 1)
    # ~8 MB on the partition.
    p = rd_producer(broker.bootstrap, **{"linger.ms": 5, "batch.num.messages": 16})  # ~16 KiB batches
    for i in range(8000):
        p.produce(topic_name, b"%06d" % i + b"v" * 1018, partition=0)
    assert p.flush(30) == 0
    credit = 64 << 10
    with connect(broker.bootstrap) as s:
        s.sendall(open_stream(7, 1, topic_name, credit, 16 << 10, 2500))
        time.sleep(1.5)  # not reading: the broker must not run ahead of the credit
        pushed = 0
        reason = None
        while reason is None:
            corr, body = read_response(s, timeout=10)
            assert corr == 7
            stream_id, kind = struct.unpack(">ib", body[:5])
            assert stream_id == 1
            if kind == 0:  # ACK
                assert struct.unpack(">h", body[5:7])[0] == 0
            elif kind == 1:  # DATA
                _seq, credit_left, n = struct.unpack(">iii", body[5:17])
                pos = 17
                for _ in range(n):
                    (tl,) = struct.unpack(">h", body[pos:pos + 2]); pos += 2 + tl
                    _part, err, _hw, size = struct.unpack(">ihqi", body[pos:pos + 18]); pos += 18 + size
                    assert err == 0
                    pushed += size
                assert credit_left == credit - pushed
            elif kind == 2:  # END
                _seq, reason, err = struct.unpack(">ibh", body[5:12])
        assert 0 < pushed <= credit, pushed
        assert reason in (0, 1), reason  # credit spent, or the deadline while waiting for credit
        ping(s)  # the connection still serves ordinary requests
    broker.check_alive()


def test_malformed_stream_fetch_closes_only_that_connection(broker):
    with connect(broker.bootstrap) as other:
        with connect(broker.bootstrap) as s:
            s.sendall(frame(API_STREAM_FETCH, 0, 1, struct.pack(">bi", 9, 1)))  # unknown op
            try:
                read_response(s, timeout=5)
                raise AssertionError("the broker answered a malformed StreamFetch")
            except Closed:
                pass
        ping(other)
    broker.check_alive()


def test_kafka_clients_are_not_offered_the_extension(broker, topic_name):
    with connect(broker.bootstrap) as s:
        apis = ping(s)
        assert API_STREAM_FETCH not in apis, apis
        assert 1 in apis  # Fetch
    rd_create_topic(broker.bootstrap, topic_name, 1)
    msgs = sample_messages(50, 1)
    rd_produce(rd_producer(broker.bootstrap), topic_name, msgs)
    assert len(rd_consume(broker.bootstrap, topic_name, [0], 50)) == 50
