"""Logins that tell nothing and cost the guesser (issue 35, item 5).

Found by an outside test: the answers to a wrong password and to an unknown user were the same,
but PLAIN took 2.0 ms for a wrong password and 0.11 ms for an unknown user (the password was
only hashed for a real one); an unknown user's SCRAM salt changed across restarts while a real
user's did not; failed logins were neither delayed nor throttled (8 ms of CPU each, 122/s from
8 threads) and wrote two log lines each. Now: an unknown user's PLAIN password is hashed against
a made-up credential at the same cost; unknown users' SCRAM salts come from the broker's own
secret (`DATA_DIR/weir-secret`), the same across restarts; a failed login is answered after
`connection.failed.authentication.delay.ms` (Kafka's, 100 ms); 10 failures from one address
within 10 s make its next logins fail unchecked for the rest of the window; failures are
logged at most once a second per core.

Raw SaslHandshake v1 + SaslAuthenticate v0 requests, so that each answer can be timed and the
SCRAM server-first message read.
"""

from __future__ import annotations

import statistics
import struct
import subprocess
import time

import kafka_wire as kw
from conftest import WEIR_BIN

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
SETTINGS = {"listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0"}


def add_user(broker, user: str, password: str) -> None:
    r = subprocess.run([str(WEIR_BIN), "user", "add", user, "--password-stdin", "--bootstrap", broker.bootstrap],
                       input=f"{password}\n", capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr


def sasl(addr: str, mechanism: str, token: bytes) -> tuple[int, bytes, float]:
    """One login's first SaslAuthenticate: (error code, auth bytes, seconds it took)."""
    s = kw.connect(addr)
    try:
        s.sendall(kw.frame(SASL_HANDSHAKE, 1, 1, kw.string(mechanism)))
        _, body = kw.read_response(s)
        assert struct.unpack_from(">h", body)[0] == 0, body
        t0 = time.perf_counter()
        s.sendall(kw.frame(SASL_AUTHENTICATE, 0, 2, struct.pack(">i", len(token)) + token))
        _, body = kw.read_response(s)
        took = time.perf_counter() - t0
        (error,) = struct.unpack_from(">h", body)
        (mlen,) = struct.unpack_from(">h", body, 2)
        pos = 4 + max(mlen, 0)
        (alen,) = struct.unpack_from(">i", body, pos)
        return error, body[pos + 4:pos + 4 + max(alen, 0)], took
    finally:
        s.close()


def plain(user: str, password: str) -> bytes:
    return b"\0" + user.encode() + b"\0" + password.encode()


def scram_salt(addr: str, user: str) -> tuple[str, str]:
    """(salt, iterations) of the SCRAM-SHA-512 server-first message for `user`."""
    error, first, _ = sasl(addr, "SCRAM-SHA-512", b"n,,n=" + user.encode() + b",r=abcdefghijklmnop")
    assert error == 0, error
    fields = dict(f.split("=", 1) for f in first.decode().split(","))
    return fields["s"], fields["i"]


def test_an_unknown_user_costs_and_looks_like_a_known_one(broker_factory):
    b = broker_factory(settings={**SETTINGS, "connection.failed.authentication.delay.ms": "0"})
    add_user(b, "alice", "alice-pw")
    addr = b.listener_bootstrap("SASL_PLAINTEXT")
    wrong, unknown = [], []
    for i in range(10):
        e1, _, t1 = sasl(addr, "PLAIN", plain("alice", f"guess-{i}"))
        e2, _, t2 = sasl(addr, "PLAIN", plain(f"nobody-{i}", f"guess-{i}"))
        assert e1 == e2 == 58, (e1, e2)
        wrong.append(t1)
        unknown.append(t2)
        if i == 4:
            time.sleep(10.5)  # stay under the throttle: 10 failures per address in 10 s
    w, u = statistics.median(wrong), statistics.median(unknown)
    print(f"\nPLAIN median answer: wrong password {w * 1000:.2f} ms, unknown user {u * 1000:.2f} ms")
    assert u > 0.5 * w, f"an unknown user is answered much faster ({u * 1000:.2f} vs {w * 1000:.2f} ms)"

    # SCRAM: an unknown user's challenge looks like a real one's and stays across a restart.
    real = scram_salt(addr, "alice")
    fake = scram_salt(addr, "nobody")
    assert len(real[0]) == len(fake[0]) and real[1] == fake[1], (real, fake)
    b.restart()
    addr = b.listener_bootstrap("SASL_PLAINTEXT")
    assert scram_salt(addr, "alice") == real
    assert scram_salt(addr, "nobody") == fake, "an unknown user's salt changed across a restart"


def test_failed_logins_are_delayed_throttled_and_logged_sparingly(broker_factory):
    # One core: the throttle counts per core (no state shared between cores).
    b = broker_factory(settings=SETTINGS, cores=1)
    add_user(b, "alice", "alice-pw")
    addr = b.listener_bootstrap("SASL_PLAINTEXT")
    error, _, took = sasl(addr, "PLAIN", plain("alice", "alice-pw"))
    assert error == 0
    error, _, took = sasl(addr, "PLAIN", plain("alice", "wrong"))
    assert error == 58 and took >= 0.09, f"a failed login answered after {took * 1000:.0f} ms"
    for i in range(12):
        assert sasl(addr, "PLAIN", plain("alice", f"wrong-{i}"))[0] == 58
    # Throttled: even the right password is not checked from this address for now.
    assert sasl(addr, "PLAIN", plain("alice", "alice-pw"))[0] == 58
    log = b.log_path.read_text(errors="replace")
    assert "throttled" in log
    failures = log.count("SASL authentication failed; closing connection")
    assert 1 <= failures <= 4, f"{failures} log lines for 14 failed logins in ~2 s"
    time.sleep(10.5)
    assert sasl(addr, "PLAIN", plain("alice", "alice-pw"))[0] == 0, "still throttled after the window"
