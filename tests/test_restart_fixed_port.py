"""Restarts on the default, fixed port (127.0.0.1:9092; metrics on 127.0.0.1:9644).

What broke: a broker started with its defaults, used by a client, then stopped (SIGTERM, as
`systemctl restart weir` does) or killed, refused to start again for about a minute with
`--listen 127.0.0.1:9092: Address already in use (os error 98)`. The start-up check bound a
plain listener (SO_REUSEADDR without SO_REUSEPORT) to see whether another process listens there,
and the previous run's connections lingering in TIME_WAIT / FIN_WAIT — which inherited
SO_REUSEPORT from weir's listeners — made that bind fail. Every other test binds port 0 and never
saw it. Now the check looks for a live listener only: restarts succeed at once, and a port that
another live process listens on (with or without SO_REUSEPORT) is still refused with a message.
"""

from __future__ import annotations

import socket
import subprocess
import time

import pytest
from confluent_kafka import TopicPartition

from clients import Msg, rd_consume, rd_consumer, rd_create_topic, rd_produce, rd_producer
from conftest import WEIR_BIN

DEFAULT = ("127.0.0.1", 9092)


def open_connections(n: int = 4) -> list[socket.socket]:
    """Raw client connections that stay open across the stop: the server side closes first."""
    conns = [socket.create_connection(DEFAULT, timeout=5) for _ in range(n)]
    for c in conns:
        c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\0" * 8)
    return conns


def lingering_server_sockets() -> int:
    """Sockets on 127.0.0.1:9092 left by a dead broker (TIME-WAIT, FIN-WAIT-*), per `ss`."""
    out = subprocess.run(["ss", "-tanH", "sport", "= :9092"], capture_output=True, text=True).stdout
    return sum(1 for line in out.splitlines() if not line.startswith("LISTEN"))


def produce_and_read(broker, topic: str, n: int, start: int) -> None:
    msgs = [Msg(key=b"k%d" % i, value=b"v%d" % (start + i)) for i in range(n)]
    p = rd_producer(broker.bootstrap, acks="all")
    rd_produce(p, topic, msgs)
    got = rd_consume(broker.bootstrap, topic, [0], start + n)
    assert [r.value for r in got] == [b"v%d" % i for i in range(start + n)]


@pytest.mark.timeout(180)
def test_restart_on_default_port_after_traffic(broker_factory, topic_name):
    broker = broker_factory(fixed_port=True)
    assert broker.bootstrap == "127.0.0.1:9092"
    rd_create_topic(broker.bootstrap, topic_name, 1)
    produce_and_read(broker, topic_name, 50, 0)

    # Graceful stop with clients connected a moment before, then start again at once.
    conns = open_connections()
    consumer = rd_consumer(broker.bootstrap, **{"fetch.wait.max.ms": 100})
    consumer.assign([TopicPartition(topic_name, 0, 0)])
    consumer.poll(1.0)
    broker.stop()
    assert lingering_server_sockets() > 0, "the test needs the stopped broker's sockets to linger"
    t0 = time.monotonic()
    broker.start()
    print(f"restart after SIGTERM: listening again in {time.monotonic() - t0:.2f}s")
    assert broker.bootstrap == "127.0.0.1:9092"
    produce_and_read(broker, topic_name, 50, 50)

    # kill -9 with connections open, then start again at once.
    conns += open_connections()
    consumer.poll(1.0)
    t0 = time.monotonic()
    broker.kill9()
    print(f"restart after SIGKILL: listening again in {time.monotonic() - t0:.2f}s")
    produce_and_read(broker, topic_name, 50, 100)
    consumer.close()
    for c in conns:
        c.close()


@pytest.mark.parametrize("reuseport", [False, True], ids=["plain", "so_reuseport"])
def test_port_held_by_a_live_listener_is_refused(tmp_path, reuseport):
    """Another live process on the port — even one that set SO_REUSEPORT, with which the kernel
    would let weir share the port silently — stops the start with a clear message. (A port the
    kernel picks: 9092 may still have the previous test's closing sockets, which a plain bind of
    this holder would trip over.)"""
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if reuseport:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    addr = "127.0.0.1:%d" % holder.getsockname()[1]
    try:
        r = subprocess.run([str(WEIR_BIN), "serve", "--listen", addr, "--set", "metrics.listen=off"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    finally:
        holder.close()
    assert r.returncode != 0, f"weir started on a port another process listens on:\n{r.stdout}{r.stderr}"
    assert addr in r.stderr and "already in use" in r.stderr, r.stderr
    assert "listening on" not in r.stdout
