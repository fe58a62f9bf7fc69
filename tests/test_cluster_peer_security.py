"""The peer port takes orders only from the cluster's brokers (issue 35, item 1).

Before: one raw TCP frame to a broker's inter-broker port — kind 2 `Forward`, a JSON body
naming any `from` and carrying an `AlterUser` metadata record with a credential derived from a
password of the attacker's choice — was proposed and applied: afterwards `admin` logged in with
the attacker's password on every client port. Any metadata record could be injected that way
(users, ACLs, topic deletion, placement).

Now a cluster must choose `security.inter.broker.protocol`. With `SSL` (what every cluster
test uses: tests/cluster_net.py, test_cluster_metadata.py) the peer port speaks mutual TLS:
only a certificate of the cluster's CA that is valid for a broker's host in
`controller.quorum.voters` gets a connection, and a frame naming another broker than that
certificate proves closes it. Here, on a 2-broker cluster: the raw frame, a TLS client with a
certificate from another CA, one from the cluster's CA for a host that is no broker's, and
broker 2's own certificate sending a frame as broker 1 — each refused and logged, nothing
applied. And, as the control that shows the frame is a real attack: the same frame on a
cluster started with `security.inter.broker.protocol=PLAINTEXT` is applied.
"""

from __future__ import annotations

import base64
import json
import socket
import ssl
import struct
import subprocess
import time

from cluster_net import start_cluster
from conftest import TMP_ROOT, WEIR_BIN, close_brokers
from tls_certs import Ca
import tls_certs

KIND_FORWARD = 2
KIND_PING = 7


def link_hello(core: int) -> bytes:
    """The first bytes of a core link (`weir::protocol::peer::LinkHello`): for core `core`."""
    return bytes([0xF7, ord("W"), ord("P"), 1]) + struct.pack(">H", core)


def ping_frame(claimed_from: int) -> bytes:
    return struct.pack(">I", 9) + bytes([KIND_PING]) + struct.pack(">Q", claimed_from)


def forward_frame(claimed_from: int, user: str) -> bytes:
    """A `Forward` of an AlterUser record that would make `user` a SCRAM user."""
    credential = {"salt": base64.b64encode(b"attacker-salt").decode(), "iterations": 4096,
                  "stored_key": base64.b64encode(b"s" * 32).decode(),
                  "server_key": base64.b64encode(b"k" * 32).decode()}
    body = json.dumps({"from": claimed_from, "req": 7, "records": [
        {"type": "AlterUser", "user": user, "mechanism": "SCRAM-SHA-256", "credential": credential}]}).encode()
    return struct.pack(">I", len(body) + 1) + bytes([KIND_FORWARD]) + body


def peer_address(b) -> tuple[str, int]:
    i = b.settings["node.id"]
    entry = next(e for e in b.settings["controller.quorum.voters"].split(",") if e.startswith(f"{i}@"))
    host, port = entry.split("@")[1].rsplit(":", 1)
    return host, int(port)


def users(b) -> str:
    r = subprocess.run([str(WEIR_BIN), "user", "list", "--bootstrap", b.bootstrap], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout


def closed_by_peer(sock) -> bool:
    """True once the broker closed the connection (or refused its TLS), within 5 s; what it
    sends before (a TLS alert) is read past."""
    sock.settimeout(5)
    deadline = time.monotonic() + 5
    try:
        while time.monotonic() < deadline:
            if sock.recv(4096) == b"":
                return True
    except (ConnectionResetError, ssl.SSLError, BrokenPipeError):
        return True
    except socket.timeout:
        return False
    return False


def tls_client(host: str, port: int, ca: str, cert, key, hello: bytes = b"") -> ssl.SSLSocket:
    """A TLS connection to a peer port; `hello` goes first, in plaintext (a core link's)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(ca)
    ctx.load_cert_chain(cert, key)
    sock = socket.create_connection((host, port), timeout=5)
    if hello:
        sock.sendall(hello)
        assert sock.recv(1) == b"\xf7", "the core link's hello was not answered"
    return ctx.wrap_socket(sock, server_hostname=host)


def test_the_peer_port_refuses_who_is_not_a_broker(request):
    brokers = start_cluster(request, 2, own_addresses=True)
    try:
        b1, b2 = brokers
        host1, port1 = peer_address(b1)
        applied_before = users(b1)

        # 1. The raw frame of the finding, in plaintext: the TLS handshake fails.
        s = socket.create_connection((host1, port1), timeout=5)
        s.sendall(forward_frame(2, "mallory"))
        assert closed_by_peer(s), "a plaintext frame on the TLS peer port was not refused"
        s.close()
        time.sleep(1.1)  # refusals are logged at most once a second

        # 2. TLS with a certificate of another CA.
        other = Ca(TMP_ROOT / "other-ca", "not-the-cluster-ca")
        stranger = other.issue_broker("stranger", "127.0.0.3")
        try:
            t = tls_client(host1, port1, b1.settings["ssl.truststore.location"], stranger.cert, stranger.key)
            t.sendall(forward_frame(2, "mallory"))
            assert closed_by_peer(t), "a certificate of another CA was accepted"
        except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
            pass  # refused in the handshake itself
        time.sleep(1.1)

        # 3. The cluster's CA, but for a host that is no broker's.
        outsider = tls_certs._PEER_CA.issue_broker("outsider", "127.0.0.9")
        t = tls_client(host1, port1, b1.settings["ssl.truststore.location"], outsider.cert, outsider.key)
        t.sendall(forward_frame(2, "mallory"))
        assert closed_by_peer(t), "a certificate for no broker's host was accepted"
        time.sleep(1.1)

        # 4. Broker 2's own certificate, sending a frame as broker 1 (itself: not what it proves).
        t = tls_client(host1, port1, b1.settings["ssl.truststore.location"], b2.settings["ssl.certificate.location"],
                       b2.settings["ssl.key.location"])
        t.sendall(forward_frame(1, "mallory"))
        assert closed_by_peer(t), "a frame naming another broker than the certificate was handled"

        time.sleep(1.0)
        for b in brokers:
            assert "mallory" not in users(b), f"the injected user exists:\n{users(b)}"
        assert users(b1) == applied_before
        log = b1.log_path.read_text(errors="replace")
        refusals = [line for line in log.splitlines() if "refused a peer connection" in line]
        assert len(refusals) == 4, b1.log_tail()
        assert "valid for no other broker's host" in refusals[2], refusals[2]
        assert "a frame from broker 1 on a connection authenticated as [2]" in refusals[3], refusals[3]

        # A core link (the hello, then TLS, handed to the core it names) is held to the same
        # rules, and carries nothing but partition messages and keepalives.
        # 5. A hello for a core broker 1 does not have: closed before anything else.
        s = socket.create_connection((host1, port1), timeout=5)
        s.sendall(link_hello(9) + forward_frame(2, "mallory"))
        assert closed_by_peer(s), "a core link for core 9 of a 2-core broker was kept"
        # 6. A hello for core 1, then the raw frame: the TLS handshake fails.
        s = socket.create_connection((host1, port1), timeout=5)
        s.sendall(link_hello(1) + forward_frame(2, "mallory"))
        assert closed_by_peer(s), "a plaintext frame on a TLS core link was not refused"
        time.sleep(1.1)
        b2_cert = (b2.settings["ssl.certificate.location"], b2.settings["ssl.key.location"])
        # 7. Broker 2's certificate, a forwarded admin request as broker 2: not on a core link.
        t = tls_client(host1, port1, b1.settings["ssl.truststore.location"], *b2_cert, hello=link_hello(1))
        t.sendall(forward_frame(2, "mallory"))
        assert closed_by_peer(t), "a forwarded request on a core link was handled"
        time.sleep(1.1)
        # 8. Broker 2's certificate, a keepalive as broker 1.
        t = tls_client(host1, port1, b1.settings["ssl.truststore.location"], *b2_cert, hello=link_hello(1))
        t.sendall(ping_frame(1))
        assert closed_by_peer(t), "a core link sending as another broker than its certificate was kept"
        time.sleep(1.0)
        for b in brokers:
            assert "mallory" not in users(b), f"the injected user exists:\n{users(b)}"
        log = b1.log_path.read_text(errors="replace")
        refusals = [line for line in log.splitlines() if "refused a peer connection" in line][4:]
        assert len(refusals) == 3, b1.log_tail()
        assert "TLS" in refusals[0], refusals[0]
        assert "a frame other than a partition message or a keepalive on a core link" in refusals[1], refusals[1]
        assert "a frame from broker 1 on a connection authenticated as [2]" in refusals[2], refusals[2]
        # The cluster itself still works over its TLS peer links.
        r = subprocess.run([str(WEIR_BIN), "user", "add", "carol", "--password-stdin", "--bootstrap", b2.bootstrap],
                           input="carol-pw\n", capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        deadline = time.monotonic() + 10
        while "carol" not in users(b1):
            assert time.monotonic() < deadline, "a user added on broker 2 never reached broker 1"
            time.sleep(0.2)
        for b in brokers:
            b.check_alive()
    finally:
        close_brokers(request, brokers)


def test_the_same_frame_is_applied_on_an_explicitly_plaintext_peer_port(request):
    """The control: the frame is a real attack, which is why PLAINTEXT must be chosen."""
    brokers = start_cluster(request, 2, own_addresses=True, peer_tls=False)
    try:
        b1, b2 = brokers
        # On a core link the frame is refused, PLAINTEXT or not: it carries partition
        # messages only.
        for b, other in ((b1, 2), (b2, 1)):
            s = socket.create_connection(peer_address(b), timeout=5)
            s.sendall(link_hello(1) + forward_frame(other, "eve"))
            assert closed_by_peer(s), "a forwarded request on a core link was handled"
        # To both: only the metadata leader proposes what it is forwarded.
        socks = []
        for b, other in ((b1, 2), (b2, 1)):
            s = socket.create_connection(peer_address(b), timeout=5)
            s.sendall(forward_frame(other, "mallory"))
            socks.append(s)
        deadline = time.monotonic() + 10
        while "mallory" not in users(b1):
            assert time.monotonic() < deadline, "the control frame was not applied: is the test's frame wrong?"
            time.sleep(0.2)
        for s in socks:
            s.close()
        assert "eve" not in users(b1), "a forwarded request on a core link was applied"
        assert "security.inter.broker.protocol=PLAINTEXT" in b1.log_path.read_text(errors="replace")
    finally:
        close_brokers(request, brokers)


def test_a_cluster_does_not_start_without_choosing_its_peer_security(broker_factory, tmp_path):
    r = subprocess.run([str(WEIR_BIN), "serve", "--data-dir", str(tmp_path / "data"), "--listen", "127.0.0.1:0",
                        "--node-id", "1", "--peers", "1@127.0.0.1:1,2@127.0.0.1:2"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0
    assert "security.inter.broker.protocol" in r.stderr + r.stdout, r.stderr
