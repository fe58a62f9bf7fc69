"""SASL listeners (SASL_PLAINTEXT, SASL_SSL) with SCRAM-SHA-256, SCRAM-SHA-512 and PLAIN, driven by
confluent-kafka, kafka-python, kcat and a raw-socket SCRAM client.

What a user notices: a user made with `weir user add` (or AdminClient's
alter_user_scram_credentials) logs in with every mechanism and client; a wrong password and an
unknown user get the same SASL_AUTHENTICATION_FAILED answer and a closed connection; nothing but
ApiVersions and the SASL exchange is served before a login; users survive a restart and are
stored salted and hashed, never as passwords; with connections.max.reauth.ms a client
re-authenticates on its connection (KIP-368) and one that does not is disconnected.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import socket
import struct
import subprocess
import time
import urllib.request

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient

import kafka_wire as kw
from clients import Msg, kcat, kp_consume, kp_produce, kp_producer, rd_conf, rd_consume, rd_create_topic, rd_produce, rd_producer
from conftest import WEIR_BIN

API_SASL_HANDSHAKE = 17
API_SASL_AUTHENTICATE = 36
SASL_AUTHENTICATION_FAILED = 58
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
PASSWORD = "alice-secret"


def sasl_settings(**extra) -> dict:
    s = {"listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0"}
    s.update(extra)
    return s


def weir_user(bootstrap: str, *args: str, password: str | None = None) -> subprocess.CompletedProcess:
    cmd = [str(WEIR_BIN), "user", *args, "--bootstrap", bootstrap]
    if password is not None:
        cmd.append("--password-stdin")
    return subprocess.run(cmd, input=(password + "\n").encode() if password is not None else None,
                          capture_output=True, timeout=30)


def add_user(broker, user: str = "alice", password: str = PASSWORD) -> None:
    r = weir_user(broker.bootstrap, "add", user, password=password)
    assert r.returncode == 0, r.stderr.decode()


def sasl_conf(mechanism: str, user: str = "alice", password: str = PASSWORD, protocol: str = "SASL_PLAINTEXT",
              **extra) -> dict:
    c = {"security.protocol": protocol, "sasl.mechanism": mechanism,
         "sasl.username": user, "sasl.password": password}
    c.update(extra)
    return c


def metric(broker, name: str) -> float:
    text = urllib.request.urlopen(broker.metrics_url, timeout=5).read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + "{"))


# ---- a raw SCRAM client (RFC 5802) over SaslHandshake v1 + SaslAuthenticate v1 ---------------------

def handshake(sock, mechanism: str, corr: int = 1, version: int = 1) -> tuple[int, list[str]]:
    sock.sendall(kw.frame(API_SASL_HANDSHAKE, version, corr, kw.string(mechanism)))
    got, body = kw.read_response(sock)
    assert got == corr
    (error, n) = struct.unpack(">hi", body[:6])
    mechs, pos = [], 6
    for _ in range(n):
        (ln,) = struct.unpack(">h", body[pos:pos + 2])
        mechs.append(body[pos + 2:pos + 2 + ln].decode())
        pos += 2 + ln
    return error, mechs


def authenticate(sock, token: bytes, corr: int = 2) -> tuple[int, str | None, bytes, int]:
    """SaslAuthenticate v1: (error, message, auth bytes, session lifetime ms)."""
    sock.sendall(kw.frame(API_SASL_AUTHENTICATE, 1, corr, struct.pack(">i", len(token)) + token))
    got, body = kw.read_response(sock)
    assert got == corr
    (error, ln) = struct.unpack(">hh", body[:4])
    pos = 4
    message = None
    if ln >= 0:
        message, pos = body[pos:pos + ln].decode(), pos + ln
    (bl,) = struct.unpack(">i", body[pos:pos + 4])
    auth = body[pos + 4:pos + 4 + bl]
    (lifetime,) = struct.unpack(">q", body[pos + 4 + bl:pos + 12 + bl])
    return error, message, auth, lifetime


def raw_token(sock, token: bytes, corr: int = 0) -> tuple[int, str | None, bytes, int]:
    """After SaslHandshake v0: the token as a raw frame, the answer as one (no Kafka header)."""
    sock.sendall(struct.pack(">i", len(token)) + token)
    deadline = time.monotonic() + 10
    try:
        (n,) = struct.unpack(">i", kw.recv_exact(sock, 4, deadline))
        return 0, None, kw.recv_exact(sock, n, deadline), 0
    except kw.Closed:
        return SASL_AUTHENTICATION_FAILED, "closed", b"", 0


def scram_login(sock, user: str, password: str, mechanism: str = "SCRAM-SHA-256", handshake_version: int = 1):
    """Runs a whole SCRAM exchange; returns the final SaslAuthenticate answer."""
    h = hashlib.sha256 if mechanism.endswith("256") else hashlib.sha512
    error, _ = handshake(sock, mechanism, version=handshake_version)
    assert error == 0
    authenticate = globals()["authenticate"] if handshake_version == 1 else raw_token
    bare = f"n={user},r=fyko+d2lbbFgONRv9qkxdawL"
    error, msg, server_first, _ = authenticate(sock, b"n,," + bare.encode(), corr=2)
    if error:
        return error, msg, b"", 0
    fields = dict(f.split("=", 1) for f in server_first.decode().split(","))
    salted = hashlib.pbkdf2_hmac(h().name, password.encode(), base64.b64decode(fields["s"]), int(fields["i"]))
    client_key = hmac.new(salted, b"Client Key", h).digest()
    without_proof = f"c=biws,r={fields['r']}"
    auth_message = f"{bare},{server_first.decode()},{without_proof}".encode()
    signature = hmac.new(h(client_key).digest(), auth_message, h).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature))
    final = f"{without_proof},p={base64.b64encode(proof).decode()}".encode()
    error, msg, server_final, lifetime = authenticate(sock, final, corr=3)
    if error == 0:
        server_key = hmac.new(salted, b"Server Key", h).digest()
        want = b"v=" + base64.b64encode(hmac.new(server_key, auth_message, h).digest())
        assert server_final == want, "the server proved it knows the credential"
    return error, msg, server_final, lifetime


# ---- tests ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"])
def test_confluent_kafka_logs_in_and_gets_sasl_endpoints(broker_factory, topic_name, mechanism):
    broker = broker_factory(settings=sasl_settings(), cores=2)
    add_user(broker)
    sasl = broker.listener_bootstrap("SASL_PLAINTEXT")
    conf = sasl_conf(mechanism)

    # Metadata through the SASL listener names its per-core ports, not the plaintext ones.
    md = AdminClient(rd_conf(sasl, **conf)).list_topics(timeout=20)
    plain = AdminClient(rd_conf(broker.bootstrap)).list_topics(timeout=20)
    assert sorted(md.brokers) == sorted(plain.brokers) == [0, 1]
    assert not {b.port for b in md.brokers.values()} & {b.port for b in plain.brokers.values()}

    rd_create_topic(broker.bootstrap, topic_name, 2)
    msgs = [Msg(key=b"k%d" % i, value=b"sasl-%d" % i, partition=i % 2) for i in range(200)]
    rd_produce(rd_producer(sasl, acks="all", **conf), topic_name, msgs)
    got = rd_consume(sasl, topic_name, range(2), 200, **conf)
    assert sorted((r.key, r.value) for r in got) == sorted((m.key, m.value) for m in msgs)
    assert metric(broker, "weir_sasl_authentications_total") >= 2
    broker.check_alive()


def test_kafka_python_scram(broker_factory, topic_name):
    broker = broker_factory(settings=sasl_settings(), cores=2)
    add_user(broker)
    rd_create_topic(broker.bootstrap, topic_name, 2)
    conf = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_plain_username": "alice", "sasl_plain_password": PASSWORD}
    sasl = broker.listener_bootstrap("SASL_PLAINTEXT")
    msgs = [Msg(key=b"k%d" % i, value=b"kp-%d" % i, partition=i % 2) for i in range(100)]
    kp_produce(kp_producer(sasl, **conf), topic_name, msgs)
    got = kp_consume(sasl, topic_name, range(2), 100, **conf)
    assert sorted(r.value for r in got) == sorted(m.value for m in msgs)


def test_wrong_password_and_unknown_user_get_the_same_answer(broker_factory, topic_name):
    broker = broker_factory(settings=sasl_settings())
    add_user(broker)
    sasl = broker.listener_bootstrap("SASL_PLAINTEXT")
    answers = {}
    for who, user, password in [("wrong password", "alice", "guess"), ("unknown user", "mallory", PASSWORD)]:
        # Failed logins are logged at most once a second per core (issue 35): a second apart,
        # both are, whichever core takes each connection.
        time.sleep(1.1)
        with kw.connect(sasl) as s:
            error, msg, _, _ = scram_login(s, user, password)
            assert error == SASL_AUTHENTICATION_FAILED, (who, error, msg)
            assert kw.outcome_after(s) == "closed", who
            answers[who] = msg
    assert answers["wrong password"] == answers["unknown user"], answers
    assert "invalid credentials" in answers["wrong password"]
    # The log says what really went wrong; the counter counts both.
    log = broker.log_tail()
    assert "wrong password for user alice" in log and "unknown user mallory" in log
    assert metric(broker, "weir_sasl_authentication_failures_total") == 2

    # The right password logs in and the connection serves requests.
    with kw.connect(sasl) as s:
        error, msg, _, lifetime = scram_login(s, "alice", PASSWORD)
        assert (error, lifetime) == (0, 0), msg
        kw.ping(s)
        s.sendall(kw.metadata(7))
        assert kw.read_response(s)[0] == 7
    # The same with SaslHandshake v0 and raw tokens (before KIP-152): a wrong password closes.
    with kw.connect(sasl) as s:
        assert scram_login(s, "alice", PASSWORD, "SCRAM-SHA-512", handshake_version=0)[0] == 0
        s.sendall(kw.metadata(8))
        assert kw.read_response(s)[0] == 8
    with kw.connect(sasl) as s:
        assert scram_login(s, "alice", "guess", handshake_version=0)[0] == SASL_AUTHENTICATION_FAILED

    # librdkafka reports the failure as an authentication error, and writes nothing.
    errors = []
    p = rd_producer(sasl, **sasl_conf("SCRAM-SHA-256", password="guess"), error_cb=errors.append)
    p.produce(topic_name, b"never")
    assert p.flush(10) == 1
    assert any(e.code() == confluent_kafka.KafkaError._AUTHENTICATION for e in errors), errors
    r = kcat(sasl, "-L", "-m", "5", "-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanism=PLAIN",
             "-X", "sasl.username=alice", "-X", "sasl.password=guess")
    assert r.returncode != 0
    assert topic_name not in AdminClient(rd_conf(broker.bootstrap)).list_topics(timeout=10).topics
    broker.check_alive()


def test_nothing_is_served_before_authentication(broker_factory):
    broker = broker_factory(settings=sasl_settings(**{"sasl.enabled.mechanisms": "SCRAM-SHA-512"}))
    add_user(broker)
    sasl = broker.listener_bootstrap("SASL_PLAINTEXT")
    # ApiVersions is answered (clients ask it first), Metadata closes the connection.
    with kw.connect(sasl) as s:
        kw.ping(s)
        s.sendall(kw.metadata(5))
        assert kw.outcome_after(s) == "closed"
    # A mechanism that is not enabled: UNSUPPORTED_SASL_MECHANISM with the enabled list, closed.
    with kw.connect(sasl) as s:
        assert handshake(s, "PLAIN") == (UNSUPPORTED_SASL_MECHANISM, ["SCRAM-SHA-512"])
        assert kw.outcome_after(s) == "closed"
    # SaslAuthenticate without a handshake: ILLEGAL_SASL_STATE, closed.
    with kw.connect(sasl) as s:
        assert authenticate(s, b"n,,n=alice,r=abc")[0] == ILLEGAL_SASL_STATE
        assert kw.outcome_after(s) == "closed"
    # Malformed SCRAM tokens: a failed login, never a broker crash.
    for token in [b"", b"\xff" * 64, b"p=tls,,n=a,r=b", b"n,,n=alice", os.urandom(5000)]:
        with kw.connect(sasl) as s:
            assert handshake(s, "SCRAM-SHA-512")[0] == 0
            assert authenticate(s, token)[0] == SASL_AUTHENTICATION_FAILED
            assert kw.outcome_after(s) == "closed"
    # On a listener without SASL the SASL requests get ILLEGAL_SASL_STATE, as from Kafka.
    with kw.connect(broker.bootstrap) as s:
        assert handshake(s, "PLAIN")[0] == ILLEGAL_SASL_STATE
    with kw.connect(sasl) as s:
        assert scram_login(s, "alice", PASSWORD, "SCRAM-SHA-512")[0] == 0
    broker.check_alive()


def test_users_are_managed_durable_and_stored_hashed(broker_factory, topic_name):
    from confluent_kafka.admin import (ScramCredentialInfo, ScramMechanism, UserScramCredentialDeletion,
                                       UserScramCredentialUpsertion)
    broker = broker_factory(settings=sasl_settings())
    sasl = broker.listener_bootstrap("SASL_PLAINTEXT")
    add_user(broker, "alice")
    # confluent-kafka's AdminClient: add bob (SCRAM-SHA-512 only), then describe everyone.
    admin = AdminClient(rd_conf(broker.bootstrap))
    up = UserScramCredentialUpsertion("bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), b"bob-pw")
    for f in admin.alter_user_scram_credentials([up]).values():
        f.result(10)
    desc = {u: d for u, d in admin.describe_user_scram_credentials().result(10).items()}
    assert sorted(desc) == ["alice", "bob"]
    assert sorted((c.mechanism, c.iterations) for c in desc["bob"].scram_credential_infos) == \
        [(ScramMechanism.SCRAM_SHA_512, 8192)]
    assert len(desc["alice"].scram_credential_infos) == 2
    # Kafka's checks: too few iterations, deleting what is not there.
    bad = UserScramCredentialUpsertion("carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 100), b"pw")
    with pytest.raises(confluent_kafka.KafkaException, match="Iterations"):
        [f.result(10) for f in admin.alter_user_scram_credentials([bad]).values()]
    gone = UserScramCredentialDeletion("nobody", ScramMechanism.SCRAM_SHA_256)
    with pytest.raises(confluent_kafka.KafkaException):
        [f.result(10) for f in admin.alter_user_scram_credentials([gone]).values()]

    r = weir_user(broker.bootstrap, "list", "--json")
    assert r.returncode == 0, r.stderr
    listed = {u["user"]: sorted(c["mechanism"] for c in u["credentials"]) for u in json.loads(r.stdout)["users"]}
    assert listed == {"alice": ["SCRAM-SHA-256", "SCRAM-SHA-512"], "bob": ["SCRAM-SHA-512"]}

    # Stored salted and hashed: no password in the metadata file.
    text = (broker.data_dir / "weir-metadata.json").read_text()
    assert PASSWORD not in text and "bob-pw" not in text and "stored_key" in text

    # Durable: after a kill -9 both still log in (the SASL port is a new one after a restart).
    broker.kill9()
    sasl = broker.listener_bootstrap("SASL_PLAINTEXT")
    md = AdminClient(rd_conf(sasl, **sasl_conf("SCRAM-SHA-512", "bob", "bob-pw"))).list_topics(timeout=20)
    assert md.brokers
    with kw.connect(sasl) as s:
        assert scram_login(s, "alice", PASSWORD)[0] == 0

    # A deleted user no longer logs in; a changed password takes effect at once.
    assert weir_user(broker.bootstrap, "delete", "bob").returncode == 0
    with kw.connect(sasl) as s:
        assert scram_login(s, "bob", "bob-pw", "SCRAM-SHA-512")[0] == SASL_AUTHENTICATION_FAILED
    add_user(broker, "alice", "new-password")
    with kw.connect(sasl) as s:
        assert scram_login(s, "alice", PASSWORD)[0] == SASL_AUTHENTICATION_FAILED
    with kw.connect(sasl) as s:
        assert scram_login(s, "alice", "new-password")[0] == 0
    r = weir_user(broker.bootstrap, "delete", "bob")
    assert r.returncode != 0 and b"RESOURCE_NOT_FOUND" in r.stderr.replace(b"ResourceNotFound", b"RESOURCE_NOT_FOUND")


def test_sasl_ssl_with_kcat_and_confluent_kafka(broker_factory, tmp_path, topic_name):
    from tls_certs import Ca
    ca = Ca(tmp_path / "certs", "weir-test-ca")
    server = ca.issue("server", server=True)
    broker = broker_factory(settings={"listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
                                      "ssl.certificate.location": server.cert,
                                      "ssl.key.location": server.key}, cores=2)
    add_user(broker)
    sasl_ssl = broker.listener_bootstrap("SASL_SSL")
    tls = {"ssl.ca.location": str(ca.pem)}
    lines = [f"line-{i}" for i in range(50)]
    auth = ["-X", "security.protocol=SASL_SSL", "-X", f"ssl.ca.location={ca.pem}", "-X",
            "sasl.mechanism=SCRAM-SHA-256", "-X", "sasl.username=alice", "-X", f"sasl.password={PASSWORD}"]
    p = kcat(sasl_ssl, *auth, "-P", "-t", topic_name, input="\n".join(lines).encode() + b"\n")
    assert p.returncode == 0, p.stderr
    conf = sasl_conf("PLAIN", protocol="SASL_SSL", **tls)
    got = rd_consume(sasl_ssl, topic_name, [0], 50, **conf)
    assert [r.value.decode() for r in got] == lines
    # The same port refuses a client that skips TLS, and one with a wrong password.
    assert kcat(sasl_ssl, "-L", "-m", "3", "-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanism=PLAIN",
                "-X", "sasl.username=alice", "-X", f"sasl.password={PASSWORD}").returncode != 0
    bad = [a if not a.startswith("sasl.password=") else "sasl.password=guess" for a in auth]
    assert kcat(sasl_ssl, *bad, "-L", "-m", "5").returncode != 0
    broker.check_alive()


def test_sessions_expire_and_clients_reauthenticate(broker_factory, topic_name):
    broker = broker_factory(settings=sasl_settings(**{"connections.max.reauth.ms": 1500}))
    add_user(broker)
    sasl = broker.listener_bootstrap("SASL_PLAINTEXT")
    rd_create_topic(broker.bootstrap, topic_name, 1)

    # A client that does not re-authenticate is told the lifetime, then disconnected at its
    # first request after it.
    with kw.connect(sasl) as s:
        error, _, _, lifetime = scram_login(s, "alice", PASSWORD)
        assert (error, lifetime) == (0, 1500)
        s.sendall(kw.metadata(10))
        assert kw.read_response(s)[0] == 10
        time.sleep(1.7)
        s.sendall(kw.metadata(11))
        assert kw.outcome_after(s) == "closed"
    assert "expired without re-authentication" in broker.log_tail()

    # librdkafka re-authenticates on its connections (KIP-368) and keeps producing through it.
    errors = []
    p = rd_producer(sasl, acks="all", **sasl_conf("SCRAM-SHA-256"), error_cb=errors.append)
    sent = 0
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        p.produce(topic_name, b"v%d" % sent, partition=0)
        sent += 1
        p.poll(0.05)
    assert p.flush(20) == 0
    got = rd_consume(sasl, topic_name, [0], sent, **sasl_conf("SCRAM-SHA-256"))
    assert [r.value for r in got] == [b"v%d" % i for i in range(sent)]
    assert metric(broker, "weir_sasl_reauthentications_total") >= 1
    assert not [e for e in errors if e.code() == confluent_kafka.KafkaError._AUTHENTICATION], errors


def test_sasl_configuration_is_checked(broker_factory):
    from conftest import BrokerError
    with pytest.raises(BrokerError, match="unknown SASL mechanism"):
        broker_factory(settings=sasl_settings(**{"sasl.enabled.mechanisms": "GSSAPI"}))
    with pytest.raises(BrokerError, match="SASL_SSL listener needs ssl.certificate.location"):
        broker_factory(settings={"listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0"})
