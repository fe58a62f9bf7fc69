"""Apache Kafka's Java client (kafka-clients 4.4.0) against weir: JUnit 5 classes in
tests/java/clients/, each run by the JUnit Platform console launcher against a broker started
here, plus an idempotent Java producer kept sending across kill -9 of the broker.

What a user of the Java client notices:
- ProducerTest: the producer's defaults (acks=all, idempotence) give consecutive offsets and a
  producer id the broker tracks; none/gzip/snappy/lz4/zstd batches round-trip and are stored
  compressed; headers (repeated keys, null and binary values), null keys and values,
  CreateTime timestamps; a custom partitioner and the built-in murmur2 key hash.
- TransactionsTest: commit and abort seen by read_committed and read_uncommitted consumers,
  the last stable offset, sendOffsetsToTransaction (consume-transform-produce), and fencing by
  a second producer with the same transactional.id (ProducerFencedException).
- ConsumerGroupTest: classic-protocol groups with the range and cooperative-sticky assignors
  (split, rebalance when a member leaves, which callbacks fire), static membership (a member
  restarted within its session timeout gets its partitions back with no rebalance), and
  onPartitionsLost after a missed max.poll.interval.ms.
- ConsumerProtocolTest: consumer-protocol groups (KIP-848, group.protocol=consumer): the
  broker's uniform assignor splits and rebalances incrementally (a member gives up only the
  partitions that move), nothing is read twice after a commit or skipped across a join and a
  leave, Admin.describeConsumerGroups sees a CONSUMER group; the range assignor gives
  co-partitioned topics the same partitions.
- ConsumerPositionsTest: auto commit, commitSync/commitAsync and committed(), seek,
  offsetsForTimes, beginningOffsets/endOffsets (after DeleteRecords), pause/resume.
- AdminTest: every AdminClient call weir has an API for but ACLs and SCRAM (topics and their
  configs, partitions, configs of topics and of the broker, DeleteRecords, consumer-group
  admin, DescribeCluster, DescribeLogDirs, DescribeProducers, List/DescribeTransactions,
  DescribeFeatures, ElectLeaders, partition reassignments).
- SecuredAdminTest: SCRAM users and ACLs through AdminClient, enforced on SASL logins.
- SecureRoundTripTest: producer, group consumer and admin over SSL, SASL_SSL (SCRAM-SHA-512)
  and mutual TLS (PEM trust and key stores), and a client without the right credentials refused.

The Maven project is built once per machine state (java_support.classpath: its first run
resolves Maven Central into ~/.m2). JUnit output is in the failure report of a failing test.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import WEIR_BIN, free_port_run
from java_support import classpath, java_cmd
from tls_certs import Ca

JUNIT_TIMEOUT_S = 400
SUMMARY_RE = re.compile(r"\[\s*(\d+) tests (found|skipped|started|aborted|successful|failed)\s*\]")


@pytest.fixture(scope="module")
def cp() -> str:
    return classpath("clients")


def junit(cp: str, bootstrap: str, *classes: str, props: dict[str, str] | None = None,
          timeout: float = JUNIT_TIMEOUT_S) -> str:
    """Runs the JUnit classes `classes` (weir.clients.X) with the console launcher against
    `bootstrap`; fails the pytest test with the launcher's output unless every JUnit test ran
    and passed (none skipped or aborted)."""
    sysprops = {"weir.bootstrap": bootstrap, **(props or {})}
    cmd = java_cmd() + ["-Xmx512m", "-XX:TieredStopAtLevel=1"]
    cmd += [f"-D{k}={v}" for k, v in sysprops.items()]
    cmd += ["-cp", cp, "org.junit.platform.console.ConsoleLauncher", "execute", "--disable-banner",
            "--disable-ansi-colors", "--details=tree", "--fail-if-no-tests"]
    for c in classes:
        cmd += ["--select-class", f"weir.clients.{c}"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = (e.stderr or b"").decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        pytest.fail(f"JUnit run of {classes} did not finish within {timeout}s\n{out[-20000:]}\n"
                    f"--- client log (stderr) ---\n{err[-20000:]}", pytrace=False)
    counts = {kind: int(n) for n, kind in SUMMARY_RE.findall(proc.stdout)}
    report = (f"{proc.stdout[-30000:]}\n--- client log (stderr) ---\n{proc.stderr[-20000:]}")
    print(proc.stdout)
    if (proc.returncode != 0 or counts.get("failed", 1) != 0 or counts.get("skipped", 1) != 0
            or counts.get("aborted", 1) != 0 or counts.get("successful", 0) == 0
            or counts.get("successful") != counts.get("found")):
        pytest.fail(f"JUnit {', '.join(classes)}: exit {proc.returncode}, {counts}\n{report}", pytrace=False)
    return proc.stdout


# ---- plaintext: producer, transactions, consumers, admin ---------------------------------------

PLAINTEXT_CLASSES = ["ProducerTest", "TransactionsTest", "ConsumerGroupTest", "ConsumerPositionsTest", "AdminTest",
                     "ConsumerProtocolTest"]
# Run below against brokers with their own settings; RackConsumerTest by
# tests/test_cluster_hosts.py against brokers in racks; TieredConsumerTest by
# tests/test_tiered_storage.py against a broker with an S3 bucket.
OTHER_CLASSES = ["SecuredAdminTest", "SecureRoundTripTest", "RackConsumerTest", "TieredConsumerTest"]


def test_every_junit_class_is_run():
    """A JUnit class added under tests/java/clients/ but not run here would pass unseen."""
    src = Path(__file__).resolve().parent / "java" / "clients" / "src" / "test" / "java" / "weir" / "clients"
    found = sorted(p.stem for p in src.glob("*Test.java"))
    assert found == sorted(PLAINTEXT_CLASSES + OTHER_CLASSES)


@pytest.mark.timeout(JUNIT_TIMEOUT_S + 60)
@pytest.mark.parametrize("java_class", PLAINTEXT_CLASSES)
def test_java_client(cp, broker, java_class):
    junit(cp, broker.bootstrap, java_class)
    broker.check_alive()


# ---- ACLs and SCRAM users --------------------------------------------------------------------

ACL_SETTINGS = {
    "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:ANONYMOUS",
}


@pytest.mark.timeout(JUNIT_TIMEOUT_S + 60)
def test_java_admin_acls_and_scram_users(cp, broker_factory):
    broker = broker_factory(settings=ACL_SETTINGS)
    junit(cp, broker.bootstrap, "SecuredAdminTest",
          props={"weir.sasl.bootstrap": broker.listener_bootstrap("SASL_PLAINTEXT")})
    broker.check_alive()


# ---- SSL, SASL_SSL, mutual TLS -----------------------------------------------------------------

def write_props(path: Path, props: dict[str, str]) -> str:
    # java.util.Properties: backslashes escape, so none in values (paths here have none).
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return str(path)


def jaas(user: str, password: str) -> str:
    return f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{user}" password="{password}";'


@pytest.mark.timeout(JUNIT_TIMEOUT_S + 60)
@pytest.mark.parametrize("mode", ["ssl", "sasl_ssl_scram_sha_512", "mutual_tls"])
def test_java_clients_over_secured_listeners(cp, broker_factory, tmp_path, mode):
    ca = Ca(tmp_path / "ca", "weir-java-ca")
    server = ca.issue("server", server=True)
    trust = {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca.pem)}
    settings = {"ssl.certificate.location": server.cert, "ssl.key.location": server.key}
    if mode == "ssl":
        settings["listeners"] = "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0"
        good = {"security.protocol": "SSL", **trust}
        bad = {"security.protocol": "SSL"}  # the JVM's default trust store: our CA is unknown
        listener = "SSL"
    elif mode == "sasl_ssl_scram_sha_512":
        settings["listeners"] = "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0"
        sasl = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", **trust}
        good = {**sasl, "sasl.jaas.config": jaas("alice", "alice-secret")}
        bad = {**sasl, "sasl.jaas.config": jaas("alice", "a-guess")}
        listener = "SASL_SSL"
    else:
        clients_ca = Ca(tmp_path / "clients-ca", "weir-java-clients-ca")
        settings.update({"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
                         "ssl.client.auth": "required", "ssl.truststore.location": clients_ca.pem})
        alice = clients_ca.issue("alice", server=False)
        keystore = tmp_path / "alice-keystore.pem"  # Kafka's PEM key store: key and chain in one file
        keystore.write_bytes(alice.key.read_bytes() + alice.cert.read_bytes())
        good = {"security.protocol": "SSL", **trust, "ssl.keystore.type": "PEM",
                "ssl.keystore.location": str(keystore)}
        bad = {"security.protocol": "SSL", **trust}  # no client certificate
        listener = "SSL"
    broker = broker_factory(settings=settings)
    if mode.startswith("sasl"):
        r = subprocess.run([str(WEIR_BIN), "user", "add", "alice", "--password-stdin", "--mechanism",
                            "SCRAM-SHA-512", "--bootstrap", broker.bootstrap],
                           input=b"alice-secret\n", capture_output=True, timeout=30)
        assert r.returncode == 0, r.stderr
    junit(cp, broker.listener_bootstrap(listener), "SecureRoundTripTest", props={
        "weir.client.config": write_props(tmp_path / "client.properties", good),
        "weir.bad.client.config": write_props(tmp_path / "bad-client.properties", bad),
        "weir.plaintext.bootstrap": broker.bootstrap})
    broker.check_alive()


# ---- kill -9 under an idempotent Java producer ---------------------------------------------------

KILL9_PARTITIONS = 4
KILL9_PER_PARTITION = int(os.environ.get("WEIR_JAVA_KILL9_RECORDS", "5000"))
KILL9_AT = (0.15, 0.35, 0.55, 0.75)  # kill when this share of the records is acknowledged


@pytest.mark.timeout(300)
def test_idempotent_producer_exactly_once_across_kill9(cp, broker_factory, topic_name):
    cores = 2
    port = free_port_run(cores + 1)
    broker = broker_factory(settings={"listeners": f"PLAINTEXT://127.0.0.1:{port}",
                                      "num.partitions": KILL9_PARTITIONS}, cores=cores)
    r = subprocess.run([str(WEIR_BIN), "topic", "create", topic_name, "--partitions", str(KILL9_PARTITIONS),
                        "--bootstrap", broker.bootstrap], capture_output=True, timeout=30)
    assert r.returncode == 0, r.stderr
    total = KILL9_PARTITIONS * KILL9_PER_PARTITION
    cmd = java_cmd() + ["-Xmx512m", "-cp", cp, "weir.clients.KillNineProducer", broker.bootstrap, topic_name,
                        str(KILL9_PARTITIONS), str(KILL9_PER_PARTITION)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    acked = [0]
    err_lines: list[str] = []

    def read_out():
        for line in proc.stdout:
            lines.append(line.rstrip())
            if line.startswith("ACKED "):
                acked[0] = int(line.split()[1])

    def read_err():
        for line in proc.stderr:
            err_lines.append(line.rstrip())

    threads = [threading.Thread(target=read_out, daemon=True), threading.Thread(target=read_err, daemon=True)]
    for t in threads:
        t.start()
    kills = []
    try:
        for share in KILL9_AT:
            deadline = time.monotonic() + 120
            while acked[0] < share * total:
                assert proc.poll() is None, f"producer exited early:\n" + "\n".join(lines[-50:] + err_lines[-50:])
                assert time.monotonic() < deadline, f"stuck at {acked[0]} acked\n" + "\n".join(lines[-20:])
                time.sleep(0.01)
            kills.append(acked[0])
            broker.kill9()
        rc = proc.wait(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for t in threads:
            t.join(timeout=5)
    out = "\n".join(lines[-40:]) + "\n--- client log ---\n" + "\n".join(err_lines[-100:])
    result = [ln for ln in lines if ln.startswith("RESULT ")]
    print(f"kills at {kills} acked of {total}; {result}")
    assert rc == 0 and result and result[-1].startswith("RESULT ok"), out
    # Each kill landed while records were still unacknowledged (the producer had to resend).
    assert all(k < total for k in kills), (kills, out)
    retries = int(re.search(r"retries=(-?\d+)", result[-1]).group(1))
    assert retries > 0, f"no record was retried: the kills did not hit requests in flight\n{out}"
    broker.check_alive()
