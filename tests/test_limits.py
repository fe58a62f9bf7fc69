"""Limits at the edge: reaching one gives a clear answer (or a closed connection) and a log
line, never a crash or unbounded memory.

- `max.connections`: connections past the limit are closed at once; the broker logs it and
  keeps serving the ones it accepted, and accepts again once some close.
- `socket.request.max.bytes`: a size prefix over the limit closes the connection before any
  of the body is read (the test sends only the 4-byte prefix).
- `connections.max.idle.ms`: a connection with nothing in flight is closed after the idle
  time; one waiting on a long-polled fetch is not.
- a client that sends fetches and never reads the responses: the broker stops reading from
  it (`max_inflight_per_connection` requests read ahead, then TCP back-pressure), so its RSS
  stays bounded, and other clients are still served.
- `fetch.max.parked`: past the limit, fetches are answered at once instead of parked.
- `cross.core.queue.depth`: calls from one core to another past the depth wait their turn
  (back-pressure, logged once); nothing is lost or reordered.
"""

from __future__ import annotations

import socket
import struct
import time

import threading

from clients import (Msg, assert_exact, rd_consume, rd_create_topic, rd_produce, rd_producer,
                     sample_messages)
from kafka_wire import connect, fetch, outcome_after, parse_fetch_v4, ping, read_response


def log_has(broker, needle: str, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if needle in broker.log_path.read_text(errors="replace"):
            return True
        time.sleep(0.05)
    return False


def test_max_connections(broker_factory):
    broker = broker_factory(settings={"max.connections": 4}, cores=2)
    socks, served, refused = [], [], 0
    for _ in range(16):
        s = connect(broker.bootstrap)
        socks.append(s)
        try:
            ping(s, timeout=3)
            served.append(s)
        except Exception:  # noqa: BLE001 — closed (reset or EOF) is the expected refusal
            refused += 1
    # Two cores, ceil(4/2) per core: at most 4 served, the rest closed, never a hang.
    assert 1 <= len(served) <= 4, f"{len(served)} connections served with max.connections=4"
    assert refused == 16 - len(served)
    assert log_has(broker, "connection limit reached (max.connections)")
    for s in served:
        ping(s)  # the accepted ones still work
    for s in socks:
        s.close()
    time.sleep(0.3)
    s = connect(broker.bootstrap)
    ping(s)  # room again
    s.close()
    broker.check_alive()


def test_request_over_socket_request_max_bytes_is_refused_before_reading(broker_factory):
    broker = broker_factory(settings={"socket.request.max.bytes": 1 << 20})
    s = connect(broker.bootstrap)
    ping(s)
    s.sendall(struct.pack(">i", 100 << 20))  # announce 100 MiB, send none of it
    assert outcome_after(s, timeout=5) == "closed", "an oversized frame was not refused at its size prefix"
    s.close()
    assert log_has(broker, "socket.request.max.bytes")
    # Just under the limit is fine (an ApiVersions request padded to ~1 MiB is read and answered
    # or refused as a request, but never kills the broker).
    s = connect(broker.bootstrap)
    ping(s)
    s.close()
    broker.check_alive()


def test_idle_connections_are_closed(broker_factory, topic_name):
    broker = broker_factory(settings={"connections.max.idle.ms": 1000})
    rd_create_topic(broker.bootstrap, topic_name, 1)
    idle = connect(broker.bootstrap)
    ping(idle)
    parked = connect(broker.bootstrap)
    ping(parked)
    # A fetch at the log end waiting 2.5 s: in flight, so not idle, though no bytes move.
    parked.sendall(fetch(7, topic_name, 0, offset=0, max_wait_ms=2500))
    t0 = time.monotonic()
    assert outcome_after(idle, timeout=5) == "closed", "an idle connection was not closed"
    assert 0.8 <= time.monotonic() - t0 <= 4.0
    corr, body = read_response(parked, timeout=10)
    assert corr == 7 and parse_fetch_v4(body)[0]["error"] == 0
    assert time.monotonic() - t0 >= 2.0, "the long poll was cut short"
    assert log_has(broker, "closing idle connection (connections.max.idle.ms)")
    # After its response it is idle too, and goes the same way.
    assert outcome_after(parked, timeout=5) == "closed"
    idle.close()
    parked.close()
    broker.check_alive()


def test_client_that_never_reads_does_not_grow_memory(broker_factory, topic_name):
    broker = broker_factory()
    rd_create_topic(broker.bootstrap, topic_name, 1)
    # ~4 MiB of data, so that each fetch response is up to 1 MiB.
    rd_produce(rd_producer(broker.bootstrap, acks="all"), topic_name,
               [Msg(None, bytes([i % 251]) * 8000, (), None, 0) for i in range(500)])
    base = broker.rss_bytes()
    s = connect(broker.bootstrap)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
    s.setblocking(False)
    req = fetch(1, topic_name, 0, offset=0, max_wait_ms=0, max_bytes=1 << 20)
    sent = 0
    deadline = time.monotonic() + 15
    pending = b""
    peak = base
    # Send fetches (each asking for 1 MiB) until the broker stops taking them, or 100,000.
    stalled_since = None
    while sent < 100_000 and time.monotonic() < deadline:
        if not pending:
            pending = req
        try:
            n = s.send(pending)
            pending = pending[n:]
            if not pending:
                sent += 1
            stalled_since = None
        except BlockingIOError:
            stalled_since = stalled_since or time.monotonic()
            if time.monotonic() - stalled_since > 2.0:
                break  # the broker stopped reading: back-pressure works
            time.sleep(0.01)
        if sent % 100 == 0:
            peak = max(peak, broker.rss_bytes())
    time.sleep(1.0)
    peak = max(peak, broker.rss_bytes())
    growth = peak - base
    print(f"stalled reader: {sent} fetches of 1 MiB sent; RSS {base >> 20} -> {peak >> 20} MiB")
    # 64 requests read ahead, each response sharing the cached batches: tens of MiB at most,
    # nowhere near sent x 1 MiB.
    assert growth < 300 << 20, f"RSS grew by {growth >> 20} MiB for a client that never reads"
    # Other clients are still served while it stalls.
    other = connect(broker.bootstrap)
    ping(other)
    other.close()
    s.close()
    broker.check_alive()


def test_max_parked_fetches(broker_factory, topic_name):
    broker = broker_factory(settings={"fetch.max.parked": 2}, cores=1)
    rd_create_topic(broker.bootstrap, topic_name, 1)
    for round_ in range(2):
        socks = [connect(broker.bootstrap) for _ in range(8)]
        t0 = time.monotonic()
        for i, s in enumerate(socks):
            s.sendall(fetch(100 + i, topic_name, 0, offset=0, max_wait_ms=3000))
        fast = []
        for i, s in enumerate(socks):
            left = max(0.05, 1.0 - (time.monotonic() - t0))
            if outcome_after(s, timeout=left) == "response":  # consumed the size prefix
                fast.append(i)
        # Two parked (the limit), the other six answered at once, empty.
        assert len(fast) == 6, f"round {round_}: {len(fast)} of 8 fetches answered at once with fetch.max.parked=2"
        for i, s in enumerate(socks):
            if i not in fast:
                corr, body = read_response(s, timeout=10)
                assert corr == 100 + i and parse_fetch_v4(body)[0]["error"] == 0
        assert time.monotonic() - t0 >= 2.5, "the parked fetches did not wait"
        for s in socks:
            s.close()
    # The limit was logged, once, and the broker is fine.
    assert log_has(broker, "parked fetch limit reached")
    assert broker.log_path.read_text(errors="replace").count("parked fetch limit reached") == 1
    broker.check_alive()


def test_huge_array_count_does_not_kill_the_broker(broker):
    """Regression (found by the request_frames fuzz target): a 23-byte Produce v3 whose topic
    array claims 2^31-1 entries made the decoder reserve ~200 GB and the broker abort
    ("memory allocation of 206158430112 bytes failed"). Now the connection is refused as bad
    input and the broker keeps serving."""
    header = struct.pack(">hhi", 0, 3, 1) + struct.pack(">h", 1) + b"x"
    body = struct.pack(">hhii", -1, 1, 10000, 0x7FFFFFFF)  # txn id null, acks, timeout, topic count
    s = connect(broker.bootstrap)
    s.sendall(struct.pack(">i", len(header + body)) + header + body)
    assert outcome_after(s, timeout=5) == "closed"
    s.close()
    time.sleep(0.2)
    broker.check_alive()
    s = connect(broker.bootstrap)
    ping(s)
    s.close()


def test_cross_core_queue_depth_is_backpressure_not_loss(broker_factory, topic_name):
    """With one cross-core call allowed in flight per destination, four producers pipelining
    small batches into partitions on both cores fill the queue: calls wait, the broker says so
    once, and every record lands exactly once, in order."""
    # One advertised node (listeners.per.core=false): every client request lands on one core
    # and most partitions live on the other, so the cross-core queue is what carries them.
    broker = broker_factory(settings={"cross.core.queue.depth": 1, "listeners.per.core": "false"}, cores=2)
    partitions = 8
    rd_create_topic(broker.bootstrap, topic_name, partitions)
    msgs = sample_messages(6000, partitions)
    errors = []

    def produce(k):
        try:
            mine = [m for m in msgs if m.partition in (2 * k, 2 * k + 1)]
            rd_produce(rd_producer(broker.bootstrap, **{"linger.ms": 0, "batch.num.messages": 5}), topic_name, mine)
        except Exception as e:  # reported below, with the others
            errors.append(e)

    threads = [threading.Thread(target=produce, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert log_has(broker, "cross-core queue full"), "the full queue was not logged"
    assert broker.log_path.read_text(errors="replace").count("cross-core queue full (cross.core.queue.depth)") <= 2
    assert_exact(msgs, rd_consume(broker.bootstrap, topic_name, list(range(partitions)), len(msgs)))
    broker.check_alive()
