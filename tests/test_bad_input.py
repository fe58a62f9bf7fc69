"""Bad input over a raw socket closes that one connection (or gets an error response), and
leaves the broker, an already-open connection and new connections working.

The broker must also refuse an oversized frame before reading it into memory: after a 2 GB size
prefix it closes the connection at once instead of waiting for (or allocating) 2 GB.
"""

from __future__ import annotations

import random
import socket
import struct
import time

import pytest

import kafka_wire as wire
from clients import Msg, rd_consume, rd_create_topic, rd_produce, rd_producer

RSS_LIMIT_BYTES = 1 << 30

_rng = random.Random(20261122)
RANDOM_GARBAGE = struct.pack(">i", 64) + bytes(_rng.randrange(256) for _ in range(64))

# name -> (bytes to send, half-close after sending, what the broker may do)
CASES = {
    # An HTTP request: its first four bytes read as a ~1.2 GB size prefix.
    "http-request": (b"GET / HTTP/1.1\r\nHost: weir\r\n\r\n", False, {"closed"}),
    "random-garbage": (RANDOM_GARBAGE, False, {"closed", "response"}),
    "size-2GB": (struct.pack(">i", 0x7FFFFFFF) + b"\0" * 64, False, {"closed"}),
    "size-negative": (struct.pack(">i", -1) + b"\0" * 64, False, {"closed"}),
    "size-zero": (struct.pack(">i", 0), False, {"closed"}),
    "unknown-api-key": (wire.frame(9999, 0, 77), False, {"closed", "response"}),
    "unknown-api-version": (wire.frame(wire.API_METADATA, 999, 78, struct.pack(">i", -1)), False,
                            {"closed", "response"}),
    # A frame that ends before its size prefix says, then EOF from the client.
    "truncated-frame": (wire.api_versions(79)[:10], True, {"closed"}),
    # A whole frame whose Produce body stops half-way through its fields.
    "truncated-body": (wire.frame(wire.API_PRODUCE, 3, 80, struct.pack(">hhi", -1, 1, 30000)[:5]), False,
                       {"closed", "response"}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_closes_only_that_connection(broker, topic_name, case):
    payload, half_close, allowed = CASES[case]
    rd_create_topic(broker.bootstrap, topic_name, 1)
    producer = rd_producer(broker.bootstrap, acks="all")
    rd_produce(producer, topic_name, [Msg(None, b"before", (), None, 0)])
    keeper = wire.connect(broker.bootstrap)
    wire.ping(keeper)

    bad = wire.connect(broker.bootstrap)
    try:
        bad.sendall(payload)
        # While the bad connection sits there, others are served.
        wire.ping(keeper, correlation_id=1)
        if half_close:
            bad.shutdown(socket.SHUT_WR)
        t = time.monotonic()
        outcome = wire.outcome_after(bad, timeout=5.0)
        assert outcome in allowed, (
            f"{case}: broker's reaction was '{outcome}' after {time.monotonic() - t:.1f}s; want one of {sorted(allowed)}")
    finally:
        bad.close()

    broker.check_alive()
    assert broker.rss_bytes() < RSS_LIMIT_BYTES, f"{case}: broker RSS grew to {broker.rss_bytes() >> 20} MiB"
    wire.ping(keeper, correlation_id=2)
    keeper.close()
    with wire.connect(broker.bootstrap) as fresh:
        wire.ping(fresh, correlation_id=3)
    rd_produce(producer, topic_name, [Msg(None, b"after", (), None, 0)])
    got = rd_consume(broker.bootstrap, topic_name, [0], 2)
    assert [r.value for r in got] == [b"before", b"after"]


def test_unknown_api_key_response_if_any_keeps_correlation(broker):
    """If the broker answers an unknown API key instead of closing, the answer carries the
    request's correlation id, and the connection stays in sync for the next request."""
    with wire.connect(broker.bootstrap) as s:
        s.sendall(wire.frame(9999, 0, 1234))
        try:
            corr, _ = wire.read_response(s, timeout=5)
        except wire.Closed:
            return  # closing is a fine answer too
        assert corr == 1234
        wire.ping(s, correlation_id=1235)


def test_api_versions_with_unsupported_version_gets_error_35(broker):
    """KIP-511: a client may open with an ApiVersions version newer than the broker knows; the
    broker answers with error UNSUPPORTED_VERSION (35) in a v0 response that lists what it
    supports, so the client can retry with a version from the list (librdkafka does)."""
    with wire.connect(broker.bootstrap) as s:
        s.sendall(wire.api_versions(55, version=127))
        corr, body = wire.read_response(s, timeout=5)
        assert corr == 55
        error, apis = wire.parse_api_versions_v0(body)
        assert error == wire.ERROR_UNSUPPORTED_VERSION, f"error code {error}"
        assert wire.API_API_VERSIONS in apis, f"ApiVersions not in the advertised list {apis}"
        wire.ping(s, correlation_id=56)


def test_pipelined_requests_answered_in_order(broker, topic_name):
    rd_create_topic(broker.bootstrap, topic_name, 2)
    with wire.connect(broker.bootstrap) as s:
        reqs = []
        for corr in range(1, 41):
            reqs.append(wire.api_versions(corr) if corr % 3 else wire.metadata(corr, [topic_name]))
        reqs.append(wire.fetch(41, topic_name, 0, 0, max_wait_ms=300))  # parks until it expires
        reqs += [wire.api_versions(42), wire.metadata(43, None)]
        s.sendall(b"".join(reqs))
        got = [wire.read_response(s, timeout=10)[0] for _ in range(43)]
    assert got == list(range(1, 44)), "responses out of order"


def test_request_over_socket_request_max_bytes_is_refused(broker_factory, topic_name):
    b = broker_factory(settings={"socket.request.max.bytes": 1 << 20})
    with wire.connect(b.bootstrap) as keeper:
        wire.ping(keeper)
        with wire.connect(b.bootstrap) as s:
            # Only the size prefix and a few bytes: the broker must not wait for the rest.
            s.sendall(struct.pack(">i", 2 << 20) + wire.api_versions(1)[4:])
            assert wire.outcome_after(s, timeout=5) == "closed"
        wire.ping(keeper, correlation_id=2)
    # A request under the limit is fine.
    rd_create_topic(b.bootstrap, topic_name, 1)
    rd_produce(rd_producer(b.bootstrap, acks="all"), topic_name, [Msg(None, b"y" * (512 << 10), (), None, 0)])
    assert [len(r.value) for r in rd_consume(b.bootstrap, topic_name, [0], 1)] == [512 << 10]


def test_many_abrupt_disconnects(broker, topic_name):
    """Clients that vanish mid-request (connect, send half a frame, reset) do not disturb the broker."""
    rd_create_topic(broker.bootstrap, topic_name, 1)
    full = wire.metadata(1, [topic_name])
    for i in range(200):
        s = wire.connect(broker.bootstrap)
        s.sendall(full[: 1 + i % (len(full) - 1)])
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST on close
        s.close()
    broker.check_alive()
    with wire.connect(broker.bootstrap) as s:
        wire.ping(s)
    rd_produce(rd_producer(broker.bootstrap, acks="all"), topic_name, [Msg(None, b"ok", (), None, 0)])
    assert [r.value for r in rd_consume(broker.bootstrap, topic_name, [0], 1)] == [b"ok"]
