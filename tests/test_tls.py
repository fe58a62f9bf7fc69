"""SSL listeners: `listeners=PLAINTEXT://...,SSL://...` with rustls, driven by real clients.

Each test makes its own CA and certificates (tests/tls_certs.py). The broker listens on a
plaintext and an SSL port (two cores, so `listeners.per.core` gives each listener its own
per-core ports too), and Metadata must hand SSL clients the SSL ports.
"""

from __future__ import annotations

import socket
import ssl
import struct
import time
import urllib.request

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from clients import (Msg, kcat, kp_consume, kp_produce, kp_producer, rd_conf, rd_consume, rd_create_topic,
                     rd_produce, rd_producer)
from tls_certs import Ca


def ssl_settings(server, ca_dir=None, **extra) -> dict:
    s = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "ssl.certificate.location": server.cert,
        "ssl.key.location": server.key,
    }
    s.update(extra)
    return s


def ssl_conf(ca: Ca, **extra) -> dict:
    c = {"security.protocol": "SSL", "ssl.ca.location": str(ca.pem)}
    c.update(extra)
    return c


def kcat_ssl(bootstrap: str, ca: Ca, *args: str, **kw):
    return kcat(bootstrap, "-X", "security.protocol=SSL", "-X", f"ssl.ca.location={ca.pem}", *args, **kw)


def tls_handshake_ok(port: int, ca: Ca) -> bool:
    ctx = ssl.create_default_context(cafile=str(ca.pem))
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
            return s.version() is not None


def metric(broker, name: str) -> float:
    text = urllib.request.urlopen(broker.metrics_url, timeout=5).read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + "{"))


@pytest.fixture
def ca(tmp_path) -> Ca:
    return Ca(tmp_path / "certs", "weir-test-ca")


def test_confluent_kafka_over_ssl_gets_ssl_endpoints(broker_factory, ca, topic_name):
    broker = broker_factory(settings=ssl_settings(ca.issue("server", server=True)), cores=2)
    assert broker.ssl_port not in (None, broker.port)

    # Metadata over each listener: the same brokers (one per core), each on that listener's
    # ports; the SSL ones speak TLS.
    md_ssl = AdminClient(rd_conf(broker.ssl_bootstrap, **ssl_conf(ca))).list_topics(timeout=20)
    md_plain = AdminClient(rd_conf(broker.bootstrap)).list_topics(timeout=20)
    ssl_ports = {b.id: b.port for b in md_ssl.brokers.values()}
    plain_ports = {b.id: b.port for b in md_plain.brokers.values()}
    assert sorted(ssl_ports) == sorted(plain_ports) == [0, 1]
    assert not set(ssl_ports.values()) & set(plain_ports.values()), (ssl_ports, plain_ports)
    for port in ssl_ports.values():
        assert tls_handshake_ok(port, ca)

    msgs = [Msg(key=b"k%d" % i, value=b"ssl-%d" % i, partition=i % 2) for i in range(300)]
    rd_create_topic(broker.bootstrap, topic_name, 2)
    rd_produce(rd_producer(broker.ssl_bootstrap, acks="all", **ssl_conf(ca)), topic_name, msgs)
    got = rd_consume(broker.ssl_bootstrap, topic_name, range(2), 300, **ssl_conf(ca))
    assert sorted((r.key, r.value) for r in got) == sorted((m.key, m.value) for m in msgs)
    # The same records through the plaintext listener.
    got = rd_consume(broker.bootstrap, topic_name, range(2), 300)
    assert sorted(r.value for r in got) == sorted(m.value for m in msgs)
    broker.check_alive()


def test_kafka_python_over_ssl(broker_factory, ca, topic_name):
    broker = broker_factory(settings=ssl_settings(ca.issue("server", server=True)), cores=2)
    rd_create_topic(broker.bootstrap, topic_name, 2)
    conf = {"security_protocol": "SSL", "ssl_cafile": str(ca.pem)}
    msgs = [Msg(key=b"k%d" % i, value=b"kp-%d" % i, partition=i % 2) for i in range(100)]
    kp_produce(kp_producer(broker.ssl_bootstrap, **conf), topic_name, msgs)
    got = kp_consume(broker.ssl_bootstrap, topic_name, range(2), 100, **conf)
    assert sorted(r.value for r in got) == sorted(m.value for m in msgs)


def test_kcat_over_ssl(broker_factory, ca, topic_name):
    broker = broker_factory(settings=ssl_settings(ca.issue("server", server=True)), cores=2)
    lines = [f"line-{i}" for i in range(50)]
    p = kcat_ssl(broker.ssl_bootstrap, ca, "-P", "-t", topic_name, input="\n".join(lines).encode() + b"\n")
    assert p.returncode == 0, p.stderr
    c = kcat_ssl(broker.ssl_bootstrap, ca, "-C", "-t", topic_name, "-o", "beginning", "-e", "-f", "%s\n")
    assert c.returncode == 0, c.stderr
    assert c.stdout.decode().split() == lines
    md = kcat_ssl(broker.ssl_bootstrap, ca, "-L")
    assert b"ssl://127.0.0.1:%d/bootstrap" % broker.ssl_port in md.stdout, md.stdout


@pytest.mark.parametrize("bad", ["untrusted", "expired"])
def test_client_refuses_untrusted_or_expired_certificate(broker_factory, ca, tmp_path, bad, topic_name):
    if bad == "untrusted":
        other = Ca(tmp_path / "other", "not-the-clients-ca")
        server = other.issue("server", server=True)
    else:
        server = ca.issue("server", server=True, expired=True)
    broker = broker_factory(settings=ssl_settings(server))
    r = kcat_ssl(broker.ssl_bootstrap, ca, "-L", "-m", "2")
    assert r.returncode != 0, r.stdout
    with pytest.raises(KafkaException):
        AdminClient(rd_conf(broker.ssl_bootstrap, **ssl_conf(ca))).list_topics(timeout=2)
    # The client refused the certificate, for that reason (its TLS alert, in the broker's
    # log), and the broker serves on.
    want = "UnknownCA" if bad == "untrusted" else "CertificateExpired"
    assert "TLS handshake failed; closing connection" in broker.log_tail()
    assert f"received fatal alert: {want}" in broker.log_tail()
    assert kcat(broker.bootstrap, "-L").returncode == 0
    broker.check_alive()


def test_plaintext_client_on_ssl_port_is_closed_and_broker_survives(broker_factory, ca):
    broker = broker_factory(settings=ssl_settings(ca.issue("server", server=True)), cores=2)
    # An ApiVersions v0 request in the clear.
    body = struct.pack(">hhi", 18, 0, 1) + struct.pack(">h", 4) + b"test"
    with socket.create_connection(("127.0.0.1", broker.ssl_port), timeout=10) as s:
        s.sendall(struct.pack(">i", len(body)) + body)
        got = b""
        while chunk := s.recv(4096):
            got += chunk
    # Closed by the broker, with at most a TLS alert (content type 21), never a Kafka answer.
    assert got == b"" or got[0] == 21, got
    # librdkafka in plaintext on the SSL port fails too.
    r = kcat(broker.ssl_bootstrap, "-L", "-m", "3")
    assert r.returncode != 0
    deadline = time.monotonic() + 5
    while "TLS handshake failed" not in broker.log_tail() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "a plaintext client on the SSL port?" in broker.log_tail()
    assert metric(broker, "weir_tls_handshake_failures_total") >= 2
    # Both listeners still serve.
    assert kcat_ssl(broker.ssl_bootstrap, ca, "-L").returncode == 0
    assert kcat(broker.bootstrap, "-L").returncode == 0
    broker.check_alive()


def test_client_auth_required(broker_factory, ca, tmp_path, topic_name):
    clients_ca = Ca(tmp_path / "clients", "weir-clients-ca")
    settings = ssl_settings(ca.issue("server", server=True), **{
        "ssl.client.auth": "required", "ssl.truststore.location": clients_ca.pem})
    broker = broker_factory(settings=settings)

    # No client certificate: refused in the handshake.
    r = kcat_ssl(broker.ssl_bootstrap, ca, "-L", "-m", "2")
    assert r.returncode != 0, r.stdout
    # A certificate from a CA the broker does not trust: refused.
    stranger = Ca(tmp_path / "stranger", "stranger-ca").issue("stranger", server=False)
    r = kcat_ssl(broker.ssl_bootstrap, ca, "-L", "-m", "2", "-X", f"ssl.certificate.location={stranger.cert}",
                 "-X", f"ssl.key.location={stranger.key}")
    assert r.returncode != 0, r.stdout
    assert "TLS handshake failed" in broker.log_tail()

    # A certificate signed by the truststore's CA: produce and consume.
    alice = clients_ca.issue("alice", server=False)
    conf = ssl_conf(ca, **{"ssl.certificate.location": str(alice.cert), "ssl.key.location": str(alice.key)})
    msgs = [Msg(key=None, value=b"m%d" % i, partition=0) for i in range(20)]
    rd_produce(rd_producer(broker.ssl_bootstrap, **conf), topic_name, msgs)
    got = rd_consume(broker.ssl_bootstrap, topic_name, [0], 20, **conf)
    assert [r.value for r in got] == [m.value for m in msgs]
    # The plaintext listener is not affected by ssl.client.auth.
    assert kcat(broker.bootstrap, "-L").returncode == 0
    broker.check_alive()


def test_ssl_misconfiguration_stops_the_start(broker_factory, ca, tmp_path):
    from conftest import BrokerError
    server = ca.issue("server", server=True)
    with pytest.raises(BrokerError, match="ssl.certificate.location"):
        broker_factory(settings={"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0"})
    with pytest.raises(BrokerError, match="ssl.key.location"):
        broker_factory(settings=ssl_settings(server, **{"ssl.key.location": tmp_path / "missing.key"}))
    with pytest.raises(BrokerError, match="truststore"):
        broker_factory(settings=ssl_settings(server, **{"ssl.client.auth": "required"}))
    # With listeners.per.core, two cores' PLAINTEXT ports are P+1 and P+2: SSL on P+1 collides.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        p = s.getsockname()[1]
    with pytest.raises(BrokerError, match="would both use port"):
        broker_factory(settings=ssl_settings(server, listeners=f"PLAINTEXT://127.0.0.1:{p},SSL://127.0.0.1:{p + 1}"),
                       cores=2)


def test_large_fetch_responses_over_ssl(broker_factory, ca, topic_name):
    """Fetch responses larger than the socket's send buffer: the TLS records rustls still holds
    when a write would block must reach the client (not wait for the next response)."""
    broker = broker_factory(settings=ssl_settings(ca.issue("server", server=True)))
    rd_create_topic(broker.bootstrap, topic_name, 2)
    msgs = [Msg(key=b"%d" % i, value=bytes([i % 251]) * (64 << 10), partition=i % 2) for i in range(384)]
    rd_produce(rd_producer(broker.ssl_bootstrap, **ssl_conf(ca)), topic_name, msgs)
    got = rd_consume(broker.ssl_bootstrap, topic_name, range(2), len(msgs), timeout=60,
                     **ssl_conf(ca, **{"fetch.max.bytes": 64 << 20, "max.partition.fetch.bytes": 16 << 20}))
    assert sorted((r.key, r.value) for r in got) == sorted((m.key, m.value) for m in msgs)


def test_sighup_reloads_the_certificate(broker_factory, ca, tmp_path):
    """Certificates expire: replacing the files and sending SIGHUP gives new connections the
    new certificate without a restart; a broken file is refused and the old one kept."""
    import os
    import shutil
    import signal

    from tls_certs import Pem
    first = ca.issue("server", server=True)
    live = Pem(tmp_path / "live.pem", tmp_path / "live.key")
    shutil.copy(first.cert, live.cert)
    shutil.copy(first.key, live.key)
    broker = broker_factory(settings=ssl_settings(live))
    assert kcat_ssl(broker.ssl_bootstrap, ca, "-L").returncode == 0

    def sighup_and_wait(line: str) -> None:
        seen = broker.log_tail().count(line)
        os.kill(broker.pid, signal.SIGHUP)
        deadline = time.monotonic() + 10
        while broker.log_tail().count(line) == seen:
            assert time.monotonic() < deadline, f"no '{line}' in the log"
            time.sleep(0.05)

    # A half-written file: the reload fails, the broker keeps serving the old certificate.
    live.cert.write_text("-----BEGIN CERTIFICATE-----\ngarbage\n")
    sighup_and_wait("TLS reload failed; keeping the current certificate")
    assert kcat_ssl(broker.ssl_bootstrap, ca, "-L").returncode == 0

    # A certificate from another CA: after SIGHUP new connections get it.
    other = Ca(tmp_path / "other", "weir-other-ca")
    second = other.issue("server", server=True)
    shutil.copy(second.cert, live.cert)
    shutil.copy(second.key, live.key)
    sighup_and_wait("TLS certificate and key reloaded")
    assert kcat_ssl(broker.ssl_bootstrap, other, "-L").returncode == 0
    assert kcat_ssl(broker.ssl_bootstrap, ca, "-L", "-m", "2").returncode != 0
    assert kcat(broker.bootstrap, "-L").returncode == 0
    broker.check_alive()
