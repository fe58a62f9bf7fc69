"""Apache Kafka 4.4.0's own command-line tools (what bin/kafka-*.sh runs) against weir.

Each test runs the tool's main class from tests/java/tools (a Maven project that only brings
kafka-tools and kafka_2.13 4.4.0 with the log4j2 binding Kafka's distribution ships; logging
configured by tests/java/tools/tools-log4j2.yaml as Kafka's config/tools-log4j2.yaml does:
warnings and errors on stderr) against the real `weir` binary, asserts what an operator reads
(its output and exit code) and checks the effect with an independent client (confluent-kafka,
weir's own `weir` CLI) where there is one:

    kafka-topics              org.apache.kafka.tools.TopicCommand
    kafka-consumer-groups     org.apache.kafka.tools.consumer.group.ConsumerGroupCommand
    kafka-configs             org.apache.kafka.tools.ConfigCommand
    kafka-acls                org.apache.kafka.tools.AclCommand
    kafka-get-offsets         org.apache.kafka.tools.GetOffsetShell
    kafka-delete-records      org.apache.kafka.tools.DeleteRecordsCommand
    kafka-transactions        org.apache.kafka.tools.TransactionsCommand
    kafka-producer-perf-test  org.apache.kafka.tools.ProducerPerformance
    kafka-consumer-perf-test  org.apache.kafka.tools.ConsumerPerformance
    kafka-metadata-quorum     org.apache.kafka.tools.MetadataQuorumCommand
    kafka-console-producer    org.apache.kafka.tools.ConsoleProducer
    kafka-console-consumer    org.apache.kafka.tools.consumer.ConsoleConsumer

Most tests share one module-scoped broker (2 cores, so the tools see two per-core brokers, 0 and
1; `num.partitions=2`), each on its own topics and groups; the ACL test starts a broker with
SASL and an authorizer, the quorum test a three-broker cluster. A JVM start costs 1-2 s here, so
the short-lived tools run with C1 only and the serial GC (`QUICK_JVM`), which changes nothing
they print; the perf tools run with the JVM's defaults.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import confluent_kafka
import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AclBindingFilter, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

from clients import (Msg, now_ms, rd_admin, rd_consume, rd_consumer, rd_create_topic, rd_poll, rd_produce,
                     rd_producer, rd_topic_configs, wait_for_topic)
from conftest import WEIR_BIN, Broker, _new_workdir
from java_support import JAVA_ROOT, classpath, run_java
from test_cluster_metadata import cluster  # noqa: F401  (the three-broker fixture)
from test_cluster_metadata import wait_until

MODULE = "tools"
LOG4J = JAVA_ROOT / MODULE / "tools-log4j2.yaml"
LOG4J_OPT = f"-Dlog4j2.configurationFile={LOG4J}"
# JVM unified logging (e.g. a class-data-sharing warning) to stderr: stdout is the tool's.
JVM_LOG = ("-Xlog:disable", "-Xlog:all=warning:stderr")
QUICK_JVM = ("-Xmx512m", LOG4J_OPT, *JVM_LOG, "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
DEFAULT_JVM = ("-Xmx512m", LOG4J_OPT, *JVM_LOG)
# Class data sharing: the first tool run dumps the classes it loaded into an archive beside the
# build, later runs map it (about half the CPU of a JVM start, on a busy 2-core machine).
CDS_ARCHIVE = JAVA_ROOT / MODULE / "target" / "tools-cds.jsa"

TOPICS = "org.apache.kafka.tools.TopicCommand"
GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
CONFIGS = "org.apache.kafka.tools.ConfigCommand"
ACLS = "org.apache.kafka.tools.AclCommand"
GET_OFFSETS = "org.apache.kafka.tools.GetOffsetShell"
DELETE_RECORDS = "org.apache.kafka.tools.DeleteRecordsCommand"
TRANSACTIONS = "org.apache.kafka.tools.TransactionsCommand"
PRODUCER_PERF = "org.apache.kafka.tools.ProducerPerformance"
CONSUMER_PERF = "org.apache.kafka.tools.ConsumerPerformance"
QUORUM = "org.apache.kafka.tools.MetadataQuorumCommand"
ELECTION = "org.apache.kafka.tools.LeaderElectionCommand"
CONSOLE_PRODUCER = "org.apache.kafka.tools.ConsoleProducer"
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"

MODULE_BROKER_SETTINGS = {"num.partitions": "2"}


# -- running a tool ------------------------------------------------------------------------------


def shown(r: subprocess.CompletedProcess) -> str:
    return f"exit {r.returncode}\n--- stdout ---\n{r.stdout}\n--- stderr ---\n{r.stderr[-6000:]}"


def tool(main: str, *args: str, ok: bool = True, timeout: float = 120.0, jvm=QUICK_JVM,
         input: str | None = None) -> subprocess.CompletedProcess:
    """Runs one tool; with ok=True it must exit 0."""
    classpath(MODULE)
    built = (JAVA_ROOT / MODULE / "target" / "classpath.txt").stat().st_mtime
    if CDS_ARCHIVE.exists() and CDS_ARCHIVE.stat().st_mtime >= built:
        cds = (f"-XX:SharedArchiveFile={CDS_ARCHIVE}",)
    else:
        CDS_ARCHIVE.unlink(missing_ok=True)
        cds = (f"-XX:ArchiveClassesAtExit={CDS_ARCHIVE}",)
    try:
        r = run_java(MODULE, main, *map(str, args), timeout=timeout, jvm_args=(*jvm, *cds), input=input)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"{main} {' '.join(map(str, args))} did not finish within {timeout}s\n"
                             f"stdout: {e.stdout!r}\nstderr: {e.stderr!r}") from e
    if ok:
        assert r.returncode == 0, f"{main} {' '.join(map(str, args))}: {shown(r)}"
    return r


def lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip()]


def table(text: str, first_header: str) -> list[dict[str, str]]:
    """Rows of a whitespace-aligned table (kafka-consumer-groups) whose header starts with
    `first_header`; several tables in one output are concatenated."""
    rows, header = [], None
    for ln in text.splitlines():
        cells = ln.split()
        if not cells:
            continue
        if cells[0] == first_header:
            header = cells
            continue
        if header is not None and len(cells) == len(header):
            rows.append(dict(zip(header, cells)))
    return rows


def tab_table(text: str, first_header: str) -> list[dict[str, str]]:
    """Rows of a tab-separated table (kafka-transactions)."""
    rows, header = [], None
    for ln in text.splitlines():
        cells = [c.strip() for c in ln.split("\t")]
        if cells and cells[-1] == "":
            cells = cells[:-1]
        if cells and cells[0] == first_header:
            header = cells
            continue
        if header is not None and len(cells) == len(header):
            rows.append(dict(zip(header, cells)))
    return rows


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    c = rd_consumer(bootstrap, **{"group.id": group})
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=15)
        return {tp.partition: tp.offset for tp in got}
    finally:
        c.close()


def watermarks(bootstrap: str, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    c = rd_consumer(bootstrap)
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=15) for p in range(partitions)}
    finally:
        c.close()


def topic_names(bootstrap: str) -> set[str]:
    return set(rd_admin(bootstrap).list_topics(timeout=15).topics)


# -- the shared broker ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def _module_broker():
    classpath(MODULE)  # the Maven build (first run: resolves the jars) before any test's clock
    b = Broker(_new_workdir("test_kafka_tools"), MODULE_BROKER_SETTINGS, cores=2)
    b.failed = False
    b.start()
    yield b
    b.close()
    if not b.failed and not os.environ.get("WEIR_TEST_KEEP"):
        shutil.rmtree(b.workdir, ignore_errors=True)


@pytest.fixture
def tb(_module_broker, request) -> Broker:
    """The module's broker, attached to the test so a failure shows its log."""
    _module_broker.check_alive()
    request.node._weir_brokers = [_module_broker]
    yield _module_broker
    if getattr(request.node, "_weir_failed", False):
        _module_broker.failed = True
    _module_broker.check_alive()


# -- kafka-topics ---------------------------------------------------------------------------------


def test_topics_create_list_describe_alter_delete(tb, topic_name):
    b = tb.bootstrap
    # No '_' in the name: with one the tool warns that '.' and '_' collide in metric names.
    topic_name = topic_name.replace("_", "-")
    r = tool(TOPICS, "--bootstrap-server", b, "--create", "--topic", topic_name, "--partitions", 3,
             "--replication-factor", 1, "--config", "retention.ms=3600000", "--config", "max.message.bytes=500000")
    assert r.stdout.strip() == f"Created topic {topic_name}."
    wait_for_topic(b, topic_name, 3)
    cfg = rd_topic_configs(b, topic_name)
    assert cfg["retention.ms"] == "3600000" and cfg["max.message.bytes"] == "500000"

    assert topic_name in lines(tool(TOPICS, "--bootstrap-server", b, "--list").stdout)

    # Creating it again fails.
    r = tool(TOPICS, "--bootstrap-server", b, "--create", "--topic", topic_name, "--partitions", 1, ok=False)
    assert r.returncode == 1 and "already exists" in r.stdout, shown(r)

    def describe() -> tuple[str, list[dict[str, str]]]:
        out = tool(TOPICS, "--bootstrap-server", b, "--describe", "--topic", topic_name).stdout
        head, *parts = lines(out)
        rows = []
        for ln in parts:
            fields = dict(re.findall(r"(\w+): ?([^\t]*)", ln))
            rows.append(fields)
        return head, rows

    head, rows = describe()
    assert f"Topic: {topic_name}\t" in head and "PartitionCount: 3\t" in head and "ReplicationFactor: 1\t" in head, head
    configs = head.split("Configs: ", 1)[1].split(",")
    assert "retention.ms=3600000" in configs and "max.message.bytes=500000" in configs, head
    # Each partition's leader, replicas and ISR are what Metadata says to a librdkafka client.
    md = rd_admin(b).list_topics(topic=topic_name, timeout=15).topics[topic_name].partitions
    assert [r["Partition"] for r in rows] == ["0", "1", "2"], rows
    for r in rows:
        p = md[int(r["Partition"])]
        assert r["Leader"] == str(p.leader) and r["Replicas"] == str(p.leader) and r["Isr"] == str(p.leader), (r, p)
    assert {r["Leader"] for r in rows} == {"0", "1"}, "three partitions spread over the two per-core brokers"

    # --alter --partitions 5: two more, visible to the other client and in --describe.
    r = tool(TOPICS, "--bootstrap-server", b, "--alter", "--topic", topic_name, "--partitions", 5)
    wait_for_topic(b, topic_name, 5)
    head, rows = describe()
    assert "PartitionCount: 5\t" in head and [r["Partition"] for r in rows] == ["0", "1", "2", "3", "4"], (head, rows)
    # Fewer partitions is refused, and nothing changes.
    r = tool(TOPICS, "--bootstrap-server", b, "--alter", "--topic", topic_name, "--partitions", 2, ok=False)
    assert r.returncode == 1 and "Error while executing topic command" in r.stdout, shown(r)
    assert len(rd_admin(b).list_topics(topic=topic_name, timeout=15).topics[topic_name].partitions) == 5

    # A replication factor one broker cannot give is refused, and no topic is created.
    other = topic_name + "-rf3"
    r = tool(TOPICS, "--bootstrap-server", b, "--create", "--topic", other, "--partitions", 1,
             "--replication-factor", 3, ok=False)
    assert r.returncode == 1 and "InvalidReplicationFactorException" in r.stderr, shown(r)
    assert other not in topic_names(b)

    # --delete: gone for every client, and --describe says so.
    r = tool(TOPICS, "--bootstrap-server", b, "--delete", "--topic", topic_name)
    deadline = time.monotonic() + 15
    while topic_name in topic_names(b) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert topic_name not in topic_names(b)
    r = tool(TOPICS, "--bootstrap-server", b, "--describe", "--topic", topic_name, ok=False)
    assert r.returncode == 1 and f"Topic '{topic_name}' does not exist as expected" in r.stdout, shown(r)


# -- kafka-consumer-groups ------------------------------------------------------------------------


def consume_and_commit(bootstrap: str, group: str, topic: str, counts: dict[int, int]) -> None:
    """With `group`, reads counts[p] records of each partition p from its start and commits the
    position after the last one read (what a consumer that processed them does)."""
    c = rd_consumer(bootstrap, **{"group.id": group})
    try:
        for p, n in counts.items():
            c.assign([TopicPartition(topic, p, 0)])
            recs = rd_poll(c, n)
            mine = [r for r in recs if r.partition == p][:n]
            assert [r.offset for r in mine] == list(range(n))
            c.commit(offsets=[TopicPartition(topic, p, mine[-1].offset + 1)], asynchronous=False)
            c.unassign()
    finally:
        c.close()


def test_consumer_groups_list_describe_lag_reset_delete(tb, topic_name):
    b = tb.bootstrap
    group = f"tools-group-{uuid.uuid4().hex[:6]}"
    rd_create_topic(b, topic_name, 3)
    rd_produce(rd_producer(b), topic_name, [Msg(None, b"v%d" % i, partition=i % 3) for i in range(30)])
    consume_and_commit(b, group, topic_name, {0: 4, 1: 10, 2: 2})

    r = tool(GROUPS, "--bootstrap-server", b, "--list")
    assert group in lines(r.stdout), shown(r)
    r = tool(GROUPS, "--bootstrap-server", b, "--list", "--state")
    states = {row["GROUP"]: row["STATE"] for row in table(r.stdout, "GROUP")}
    assert states.get(group) == "Empty", shown(r)

    # --describe: per partition the committed offset, the log end and the lag (10 each, 4/10/2 read).
    r = tool(GROUPS, "--bootstrap-server", b, "--describe", "--group", group)
    rows = {int(row["PARTITION"]): row for row in table(r.stdout, "GROUP")}
    assert sorted(rows) == [0, 1, 2], shown(r)
    for p, (cur, lag) in {0: (4, 6), 1: (10, 0), 2: (2, 8)}.items():
        row = rows[p]
        assert (row["GROUP"], row["TOPIC"], row["CURRENT-OFFSET"], row["LOG-END-OFFSET"], row["LAG"]) == (
            group, topic_name, str(cur), "10", str(lag)), row
        assert row["CONSUMER-ID"] == "-", row  # nobody is consuming now
    assert f"Consumer group '{group}' has no active members." in r.stdout + r.stderr, shown(r)

    def reset(*how: str, execute: bool = True) -> dict[int, int]:
        r = tool(GROUPS, "--bootstrap-server", b, "--reset-offsets", "--group", group, *how,
                 "--execute" if execute else "--dry-run")
        return {int(row["PARTITION"]): int(row["NEW-OFFSET"]) for row in table(r.stdout, "GROUP")}

    # --to-earliest on the topic: every partition to 0, committed.
    assert reset("--topic", topic_name, "--to-earliest") == {0: 0, 1: 0, 2: 0}
    assert committed(b, group, topic_name, 3) == {0: 0, 1: 0, 2: 0}
    # --to-offset on every partition, then on one.
    assert reset("--topic", topic_name, "--to-offset", "7") == {0: 7, 1: 7, 2: 7}
    assert reset("--topic", f"{topic_name}:1", "--to-offset", "9") == {1: 9}
    assert committed(b, group, topic_name, 3) == {0: 7, 1: 9, 2: 7}
    # --shift-by on two partitions, backwards and forwards (clamped to the log end).
    assert reset("--topic", f"{topic_name}:0,2", "--shift-by", "-3") == {0: 4, 2: 4}
    assert reset("--topic", f"{topic_name}:1", "--shift-by", "5") == {1: 10}
    assert committed(b, group, topic_name, 3) == {0: 4, 1: 10, 2: 4}
    # --dry-run shows the plan and commits nothing.
    assert reset("--topic", topic_name, "--to-latest", execute=False) == {0: 10, 1: 10, 2: 10}
    assert committed(b, group, topic_name, 3) == {0: 4, 1: 10, 2: 4}
    r = tool(GROUPS, "--bootstrap-server", b, "--describe", "--group", group)
    assert {int(row["PARTITION"]): row["LAG"] for row in table(r.stdout, "GROUP")} == {0: "6", 1: "0", 2: "6"}

    # A consumer of the group resumes where the reset put it.
    c = rd_consumer(b, **{"group.id": group})
    try:
        c.subscribe([topic_name])
        got = rd_poll(c, 12)
        assert sorted((r.partition, r.offset) for r in got) == sorted(
            [(0, o) for o in range(4, 10)] + [(2, o) for o in range(4, 10)])
    finally:
        c.close()

    # --delete: the group and its offsets are gone.
    r = tool(GROUPS, "--bootstrap-server", b, "--delete", "--group", group)
    assert f"Deletion of requested consumer groups ('{group}') was successful." in r.stdout, shown(r)
    assert group not in lines(tool(GROUPS, "--bootstrap-server", b, "--list").stdout)
    assert all(o < 0 for o in committed(b, group, topic_name, 3).values())
    r = tool(GROUPS, "--bootstrap-server", b, "--describe", "--group", group)
    assert f"Group {group} not found" in r.stdout + r.stderr, shown(r)


def test_consumer_groups_with_an_active_member(tb, topic_name):
    """--describe --members shows the live member; resetting or deleting a group in use is
    refused and changes nothing."""
    b = tb.bootstrap
    group = f"tools-live-{uuid.uuid4().hex[:6]}"
    rd_create_topic(b, topic_name, 2)
    rd_produce(rd_producer(b), topic_name, [Msg(None, b"v%d" % i, partition=i % 2) for i in range(10)])
    c = rd_consumer(b, **{"group.id": group, "client.id": "tools-member"})
    try:
        c.subscribe([topic_name])
        rd_poll(c, 10)
        c.commit(offsets=[TopicPartition(topic_name, p, 5) for p in (0, 1)], asynchronous=False)

        r = tool(GROUPS, "--bootstrap-server", b, "--describe", "--group", group, "--members")
        [member] = table(r.stdout, "GROUP")
        assert member["GROUP"] == group and member["CLIENT-ID"] == "tools-member", shown(r)
        assert member["#PARTITIONS"] == "2" and member["HOST"].startswith("/127.0.0.1"), member
        assert member["CONSUMER-ID"].startswith("tools-member-"), member

        r = tool(GROUPS, "--bootstrap-server", b, "--describe", "--group", group)
        rows = table(r.stdout, "GROUP")
        assert sorted((row["PARTITION"], row["CURRENT-OFFSET"], row["LAG"], row["CONSUMER-ID"]) for row in rows) == [
            ("0", "5", "0", member["CONSUMER-ID"]), ("1", "5", "0", member["CONSUMER-ID"])], shown(r)

        r = tool(GROUPS, "--bootstrap-server", b, "--describe", "--group", group, "--state")
        [state] = table(r.stdout, "GROUP")
        assert state["STATE"] == "Stable" and state["#MEMBERS"] == "1", shown(r)

        r = tool(GROUPS, "--bootstrap-server", b, "--reset-offsets", "--group", group, "--topic", topic_name,
                 "--to-earliest", "--execute", ok=False)
        assert "inactive" in r.stdout + r.stderr, shown(r)
        r = tool(GROUPS, "--bootstrap-server", b, "--delete", "--group", group, ok=False)
        assert "The group is not empty" in r.stdout + r.stderr, shown(r)
        assert committed(b, group, topic_name, 2) == {0: 5, 1: 5}
    finally:
        c.close()


# -- kafka-configs --------------------------------------------------------------------------------


def config_lines(out: str) -> dict[str, str]:
    """'  name=value sensitive=false synonyms={...}' lines: {name: value}."""
    got = {}
    for ln in out.splitlines():
        m = re.match(r"^  ([a-z0-9._-]+)=(.*?) sensitive=(true|false) synonyms=\{.*\}$", ln)
        if m:
            got[m.group(1)] = m.group(2)
    return got


def test_configs_topic_add_delete_and_broker_describe(tb, topic_name):
    b = tb.bootstrap
    rd_create_topic(b, topic_name, 1)
    entity = ("--entity-type", "topics", "--entity-name", topic_name)

    r = tool(CONFIGS, "--bootstrap-server", b, "--describe", *entity)
    assert lines(r.stdout) == [f"Dynamic configs for topic {topic_name} are:"], shown(r)

    r = tool(CONFIGS, "--bootstrap-server", b, "--alter", *entity,
             "--add-config", "retention.ms=123456,max.message.bytes=200000,cleanup.policy=[compact,delete]")
    assert r.stdout.strip() == f"Completed updating config for topic {topic_name}.", shown(r)
    cfg = rd_topic_configs(b, topic_name)
    assert (cfg["retention.ms"], cfg["max.message.bytes"], cfg["cleanup.policy"]) == ("123456", "200000",
                                                                                      "compact,delete")
    r = tool(CONFIGS, "--bootstrap-server", b, "--describe", *entity)
    assert lines(r.stdout)[0] == f"Dynamic configs for topic {topic_name} are:"
    assert config_lines(r.stdout) == {"retention.ms": "123456", "max.message.bytes": "200000",
                                      "cleanup.policy": "compact,delete"}, shown(r)

    r = tool(CONFIGS, "--bootstrap-server", b, "--alter", *entity, "--delete-config", "retention.ms,cleanup.policy")
    assert r.stdout.strip() == f"Completed updating config for topic {topic_name}.", shown(r)
    r = tool(CONFIGS, "--bootstrap-server", b, "--describe", *entity)
    assert config_lines(r.stdout) == {"max.message.bytes": "200000"}, shown(r)
    cfg = rd_topic_configs(b, topic_name)
    assert (cfg["retention.ms"], cfg["cleanup.policy"]) == ("604800000", "delete"), "back to the defaults"

    # --all lists the defaults too.
    r = tool(CONFIGS, "--bootstrap-server", b, "--describe", *entity, "--all")
    everything = config_lines(r.stdout)
    assert lines(r.stdout)[0] == f"All configs for topic {topic_name} are:"
    assert everything["retention.ms"] == "604800000" and everything["max.message.bytes"] == "200000", shown(r)
    assert everything["cleanup.policy"] == "delete" and "segment.bytes" in everything, shown(r)

    # An invalid value is refused, and the config stays.
    r = tool(CONFIGS, "--bootstrap-server", b, "--alter", *entity, "--add-config", "retention.ms=soon", ok=False)
    assert r.returncode == 1 and "InvalidConfigurationException" in r.stdout + r.stderr, shown(r)
    assert rd_topic_configs(b, topic_name)["retention.ms"] == "604800000"

    # The broker: its settings (--all) include what it was started with; no dynamic ones.
    r = tool(CONFIGS, "--bootstrap-server", b, "--describe", "--entity-type", "brokers", "--entity-name", "0", "--all")
    assert lines(r.stdout)[0] == "All configs for broker 0 are:", shown(r)
    broker_cfg = config_lines(r.stdout)
    assert broker_cfg["num.partitions"] == "2", shown(r)
    assert broker_cfg["log.dirs"] == str(tb.data_dir), shown(r)
    r = tool(CONFIGS, "--bootstrap-server", b, "--describe", "--entity-type", "brokers")
    assert lines(r.stdout) == ["Dynamic configs for broker 0 are:", "Dynamic configs for broker 1 are:",
                               "Default configs for brokers in the cluster are:"], shown(r)
    # weir's broker settings are static (docs/configuration.md): altering one is refused, and says why.
    r = tool(CONFIGS, "--bootstrap-server", b, "--alter", "--entity-type", "brokers", "--entity-default",
             "--add-config", "log.retention.ms=100000", ok=False)
    assert r.returncode == 1 and "broker settings are static" in r.stdout + r.stderr, shown(r)


def test_configs_describe_shows_synonyms(tb, topic_name):
    """ConfigCommand asks DescribeConfigs for synonyms (include_synonyms=true): Kafka lists
    where each value comes from, e.g. for a topic override
    `retention.ms=123456 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=123456,
    DEFAULT_CONFIG:log.retention.hours=168}`."""
    b = tb.bootstrap
    rd_create_topic(b, topic_name, 1, config={"retention.ms": "123456"})
    r = tool(CONFIGS, "--bootstrap-server", b, "--describe", "--entity-type", "topics", "--entity-name", topic_name)
    [line] = [ln for ln in r.stdout.splitlines() if ln.startswith("  retention.ms=")]
    assert "DYNAMIC_TOPIC_CONFIG:retention.ms=123456" in line, shown(r)


# -- kafka-acls -----------------------------------------------------------------------------------


ACL_SETTINGS = {
    "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:ANONYMOUS;User:admin",
}


def scram_login(user: str) -> dict:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": user, "sasl.password": f"{user}-pw"}


def command_config(path: Path, user: str) -> Path:
    path.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
                    "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
                    f'username="{user}" password="{user}-pw";\n')
    return path


def produce_one(bootstrap: str, topic: str, user: str):
    """One record as `user`: None when written, else the delivery error."""
    errors = []
    p = rd_producer(bootstrap, retries=0, **{"message.timeout.ms": 10000}, **scram_login(user))
    p.produce(topic, b"from-" + user.encode(), partition=0, on_delivery=lambda err, msg: errors.append(err))
    p.flush(20)
    assert len(errors) == 1, "no delivery report"
    return errors[0]


def acl_entries(out: str) -> dict[str, set[tuple[str, str, str, str]]]:
    """`Current ACLs for resource `ResourcePattern(...)`:` blocks: {pattern: {(principal, host,
    operation, permissionType)}}."""
    got: dict[str, set] = {}
    current = None
    for ln in out.splitlines():
        m = re.search(r"ACLs for resource `(ResourcePattern\(.*\))`:", ln)
        if m:
            current = got.setdefault(m.group(1), set())
            continue
        m = re.search(r"\(principal=(.*), host=(.*), operation=(.*), permissionType=(.*)\)", ln)
        if m and current is not None:
            current.add(m.groups())
    return got


def test_acls_add_list_remove(broker_factory, topic_name, tmp_path):
    broker = broker_factory(settings=ACL_SETTINGS, cores=2)
    for user in ("admin", "alice"):
        r = subprocess.run([str(WEIR_BIN), "user", "add", user, "--password-stdin", "--bootstrap", broker.bootstrap],
                           input=f"{user}-pw\n".encode(), capture_output=True, timeout=30)
        assert r.returncode == 0, r.stderr
    sasl = broker.listener_bootstrap("SASL_PLAINTEXT")
    admin_cfg = command_config(tmp_path / "admin.properties", "admin")
    alice_cfg = command_config(tmp_path / "alice.properties", "alice")
    rd_create_topic(broker.bootstrap, topic_name, 1)
    pattern = f"ResourcePattern(resourceType=TOPIC, name={topic_name}, patternType=LITERAL)"
    group_pattern = "ResourcePattern(resourceType=GROUP, name=tools-, patternType=PREFIXED)"
    acl = ("--bootstrap-server", sasl, "--command-config")

    # No ACL: alice may not write.
    err = produce_one(sasl, topic_name, "alice")
    assert err is not None and err.code() == confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED, err

    r = tool(ACLS, *acl, admin_cfg, "--add", "--allow-principal", "User:alice", "--operation", "Write",
             "--operation", "Describe", "--topic", topic_name)
    assert acl_entries(r.stdout) == {pattern: {("User:alice", "*", "WRITE", "ALLOW"),
                                               ("User:alice", "*", "DESCRIBE", "ALLOW")}}, shown(r)
    r = tool(ACLS, *acl, admin_cfg, "--add", "--allow-principal", "User:alice", "--operation", "Read",
             "--group", "tools-", "--resource-pattern-type", "prefixed")
    assert acl_entries(r.stdout) == {group_pattern: {("User:alice", "*", "READ", "ALLOW")}}, shown(r)

    both = {pattern: {("User:alice", "*", "WRITE", "ALLOW"), ("User:alice", "*", "DESCRIBE", "ALLOW")},
            group_pattern: {("User:alice", "*", "READ", "ALLOW")}}
    assert acl_entries(tool(ACLS, *acl, admin_cfg, "--list").stdout) == both
    r = tool(ACLS, *acl, admin_cfg, "--list", "--principal", "User:alice")
    assert "ACLs for principal `User:alice`" in r.stdout and acl_entries(r.stdout) == both, shown(r)
    assert acl_entries(tool(ACLS, *acl, admin_cfg, "--list", "--topic", topic_name).stdout) == {
        pattern: both[pattern]}
    # The same bindings through another client (confluent-kafka's AdminClient, over PLAINTEXT).
    every = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)
    admin = rd_admin(broker.bootstrap)  # must outlive its futures
    seen = admin.describe_acls(every).result(15)
    assert sorted((x.restype.name, x.name, x.resource_pattern_type.name, x.principal, x.operation.name)
                  for x in seen) == sorted([("GROUP", "tools-", "PREFIXED", "User:alice", "READ"),
                                            ("TOPIC", topic_name, "LITERAL", "User:alice", "DESCRIBE"),
                                            ("TOPIC", topic_name, "LITERAL", "User:alice", "WRITE")])

    # Now alice writes.
    assert produce_one(sasl, topic_name, "alice") is None
    assert watermarks(broker.bootstrap, topic_name, 1)[0][1] == 1

    # alice is no super user: she may not manage ACLs, and nothing changes.
    r = tool(ACLS, *acl, alice_cfg, "--add", "--allow-principal", "User:alice", "--operation", "All",
             "--topic", "*", ok=False)
    assert r.returncode == 1 and "ClusterAuthorizationException" in r.stdout + r.stderr, shown(r)
    assert len(admin.describe_acls(every).result(15)) == 3

    # --remove the WRITE: listed no more, and alice's writes are refused again.
    r = tool(ACLS, *acl, admin_cfg, "--remove", "--force", "--allow-principal", "User:alice", "--operation", "Write",
             "--topic", topic_name)
    assert acl_entries(tool(ACLS, *acl, admin_cfg, "--list").stdout) == {
        pattern: {("User:alice", "*", "DESCRIBE", "ALLOW")}, group_pattern: both[group_pattern]}
    err = produce_one(sasl, topic_name, "alice")
    assert err is not None and err.code() == confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED, err
    assert watermarks(broker.bootstrap, topic_name, 1)[0][1] == 1


# -- kafka-get-offsets, kafka-delete-records ------------------------------------------------------


def offsets_out(r: subprocess.CompletedProcess) -> dict[str, int]:
    """'topic:partition:offset' lines: {"topic:partition": offset}."""
    got = {}
    for ln in lines(r.stdout):
        tp, _, off = ln.rpartition(":")
        got[tp] = int(off)
    return got


def test_get_offsets_earliest_latest_and_by_time(tb, topic_name):
    b = tb.bootstrap
    rd_create_topic(b, topic_name, 2)
    t0 = now_ms() - 600_000
    msgs = [Msg(b"k", b"v%d" % i, timestamp=t0 + i * 1000, partition=0) for i in range(10)]
    msgs += [Msg(b"k", b"w%d" % i, timestamp=t0 + i * 1000, partition=1) for i in range(5)]
    rd_produce(rd_producer(b), topic_name, msgs)
    p0, p1 = f"{topic_name}:0", f"{topic_name}:1"
    go = (GET_OFFSETS, "--bootstrap-server", b)

    assert offsets_out(tool(*go, "--topic", topic_name)) == {p0: 10, p1: 5}  # latest is the default
    assert offsets_out(tool(*go, "--topic", topic_name, "--time", "-2")) == {p0: 0, p1: 0}
    # By time: the first offset whose timestamp is at or after it; past the last record, none.
    assert offsets_out(tool(*go, "--topic", topic_name, "--time", t0 + 2500)) == {p0: 3, p1: 3}
    assert offsets_out(tool(*go, "--topic-partitions", f"{p0},{p1}", "--time", t0 + 7000)) == {p0: 7}
    # -3: the offset of the record with the largest timestamp.
    assert offsets_out(tool(*go, "--topic", topic_name, "--time", "-3")) == {p0: 9, p1: 4}
    # The same answers through librdkafka.
    c = rd_consumer(b)
    try:
        got = c.offsets_for_times([TopicPartition(topic_name, 0, t0 + 2500), TopicPartition(topic_name, 1, t0 + 7000)],
                                  timeout=15)
        assert [tp.offset for tp in got] == [3, -1]
    finally:
        c.close()


def test_delete_records_with_offset_json_file(tb, topic_name, tmp_path):
    b = tb.bootstrap
    rd_create_topic(b, topic_name, 2)
    rd_produce(rd_producer(b), topic_name, [Msg(None, b"v%d" % i, partition=i % 2) for i in range(20)])
    spec = tmp_path / "delete.json"
    spec.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic_name, "partition": 0, "offset": 4},
        {"topic": topic_name, "partition": 1, "offset": -1}]}))  # -1: up to the high watermark
    r = tool(DELETE_RECORDS, "--bootstrap-server", b, "--offset-json-file", spec)
    out = lines(r.stdout)
    assert out[:2] == ["Executing records delete operation", "Records delete operation completed:"], shown(r)
    assert sorted(out[2:]) == [f"partition: {topic_name}-0\tlow_watermark: 4",
                               f"partition: {topic_name}-1\tlow_watermark: 10"], shown(r)
    assert watermarks(b, topic_name, 2) == {0: (4, 10), 1: (10, 10)}
    got = rd_consume(b, topic_name, [0], 6)
    assert [(r.offset, r.value) for r in got] == [(o, b"v%d" % (2 * o)) for o in range(4, 10)]
    r = tool(GET_OFFSETS, "--bootstrap-server", b, "--topic", topic_name, "--time", "-2")
    assert offsets_out(r) == {f"{topic_name}:0": 4, f"{topic_name}:1": 10}

    # Beyond the high watermark: that partition's error, the others deleted.
    spec.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic_name, "partition": 0, "offset": 40},
        {"topic": topic_name, "partition": 1, "offset": 10}]}))
    r = tool(DELETE_RECORDS, "--bootstrap-server", b, "--offset-json-file", spec)
    out = lines(r.stdout)
    assert f"partition: {topic_name}-1\tlow_watermark: 10" in out, shown(r)
    assert any(ln.startswith(f"partition: {topic_name}-0\terror: ") and "OffsetOutOfRangeException" in ln
               for ln in out), shown(r)
    assert watermarks(b, topic_name, 2)[0] == (4, 10)


# -- kafka-transactions ---------------------------------------------------------------------------


def test_transactions_list_describe_and_producers(tb, topic_name):
    b = tb.bootstrap
    rd_create_topic(b, topic_name, 2)
    txn_id = f"tools-txn-{uuid.uuid4().hex[:6]}"
    p = rd_producer(b, **{"transactional.id": txn_id, "enable.idempotence": True})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(5):
        p.produce(topic_name, b"t%d" % i, partition=0)
    p.produce(topic_name, b"other", partition=1)
    assert p.flush(20) == 0
    tx = (TRANSACTIONS, "--bootstrap-server", b)
    try:
        # list: the open transaction, with its producer id and state.
        listing = tool(*tx, "list").stdout
        listed = [row for row in tab_table(listing, "TransactionalId") if row["TransactionalId"] == txn_id]
        assert listed and all(row["TransactionState"] == "Ongoing" for row in listed), listing
        pid = listed[0]["ProducerId"]
        assert int(pid) >= 0

        # describe: its coordinator, producer, state and the partitions it wrote.
        r = tool(*tx, "describe", "--transactional-id", txn_id)
        [d] = tab_table(r.stdout, "CoordinatorId")
        assert (d["TransactionalId"], d["ProducerId"], d["ProducerEpoch"], d["TransactionState"]) == (
            txn_id, pid, "0", "Ongoing"), shown(r)
        assert sorted(d["TopicPartitions"].split(",")) == [f"{topic_name}-0", f"{topic_name}-1"], shown(r)
        assert int(d["TransactionTimeoutMs"]) == 60000  # librdkafka's transaction.timeout.ms default
        coordinator = d["CoordinatorId"]
        assert coordinator in {row["Coordinator"] for row in listed}, listing

        # describe-producers: the producer's state on partition 0 (5 records, sequences 0-4).
        r = tool(*tx, "describe-producers", "--topic", topic_name, "--partition", "0")
        [s] = tab_table(r.stdout, "ProducerId")
        assert (s["ProducerId"], s["ProducerEpoch"], s["LastSequence"], s["CurrentTransactionStartOffset"]) == (
            pid, "0", "4", "0"), shown(r)

        # A read_committed consumer sees nothing yet.
        c = rd_consumer(b, **{"isolation.level": "read_committed"})
        try:
            c.assign([TopicPartition(topic_name, 0, confluent_kafka.OFFSET_BEGINNING)])
            deadline = time.monotonic() + 2
            while (left := deadline - time.monotonic()) > 0:
                m = c.poll(left)
                assert m is None or m.error() is not None, "read an uncommitted record"
        finally:
            c.close()
        p.commit_transaction(30)
        r = tool(*tx, "describe", "--transactional-id", txn_id)
        [d] = tab_table(r.stdout, "CoordinatorId")
        assert d["TransactionState"] == "CompleteCommit" and d["TopicPartitions"] == "", shown(r)
        got = rd_consume(b, topic_name, [0], 5, **{"isolation.level": "read_committed"})
        assert [r.value for r in got] == [b"t%d" % i for i in range(5)]
    finally:
        p.flush(5)
    # `list` asks every broker in Metadata (ListTransactions) and prints each answer; a Kafka
    # broker lists only the transactions it coordinates, so each id shows once, with the
    # coordinator `describe` (FindCoordinator) names.
    assert [row["Coordinator"] for row in listed] == [coordinator], f"{txn_id} listed by several brokers: {listing}"


# -- kafka-producer-perf-test, kafka-consumer-perf-test -------------------------------------------


def test_producer_and_consumer_perf_tools(tb, topic_name):
    b = tb.bootstrap
    n = 20_000
    rd_create_topic(b, topic_name, 2)
    r = tool(PRODUCER_PERF, "--topic", topic_name, "--num-records", n, "--record-size", 1024, "--throughput", -1,
             "--command-property", f"bootstrap.servers={b}", "acks=all", jvm=DEFAULT_JVM, timeout=180)
    summary = lines(r.stdout)[-1]
    m = re.match(r"^(\d+) records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg latency", summary)
    assert m and int(m.group(1)) == n, shown(r)
    hw = watermarks(b, topic_name, 2)
    assert sum(high for _, high in hw.values()) == n and all(high > 0 for _, high in hw.values()), hw

    r = tool(CONSUMER_PERF, "--bootstrap-server", b, "--topic", topic_name, "--num-records", n,
             "--timeout", 60000, jvm=DEFAULT_JVM, timeout=180)
    out = lines(r.stdout)
    header = [h.strip() for h in out[0].split(",")]
    values = dict(zip(header, (v.strip() for v in out[1].split(","))))
    assert int(values["data.consumed.in.nMsg"]) == n, shown(r)
    assert float(values["data.consumed.in.MB"]) == pytest.approx(n * 1024 / 1024 / 1024, abs=0.001), shown(r)


# -- kafka-console-producer, kafka-console-consumer -----------------------------------------------


def test_console_producer_and_consumer_round_trip(tb, topic_name):
    b = tb.bootstrap
    rd_create_topic(b, topic_name, 1)
    text = ("h1:a,h2:b\tk1\tvalue one\n"
            "h1:c\tk2\tvalue two\n"
            "h3:d\tk3\tNULL\n")
    tool(CONSOLE_PRODUCER, "--bootstrap-server", b, "--topic", topic_name, "--reader-property", "parse.key=true",
         "--reader-property", "parse.headers=true", "--reader-property", "null.marker=NULL", input=text)
    got = rd_consume(b, topic_name, [0], 3)
    assert [(r.offset, r.key, r.value, r.headers) for r in got] == [
        (0, b"k1", b"value one", (("h1", b"a"), ("h2", b"b"))),
        (1, b"k2", b"value two", (("h1", b"c"),)),
        (2, b"k3", None, (("h3", b"d"),))]

    group = f"tools-console-{uuid.uuid4().hex[:6]}"
    r = tool(CONSOLE_CONSUMER, "--bootstrap-server", b, "--topic", topic_name, "--from-beginning",
             "--group", group, "--max-messages", 3, "--timeout-ms", 30000,
             "--formatter-property", "print.key=true", "--formatter-property", "print.headers=true",
             "--formatter-property", "print.partition=true", "--formatter-property", "print.offset=true")
    assert lines(r.stdout) == ["Partition:0\tOffset:0\th1:a,h2:b\tk1\tvalue one",
                               "Partition:0\tOffset:1\th1:c\tk2\tvalue two",
                               "Partition:0\tOffset:2\th3:d\tk3\tnull"], shown(r)
    assert "Processed a total of 3 messages" in r.stderr, shown(r)
    # The console consumer's group committed what it read when it closed.
    assert committed(b, group, topic_name, 1) == {0: 3}


# -- kafka-console-consumer on __consumer_offsets, with Kafka's own formatters --------------------


def test_console_consumer_reads_consumer_offsets_with_kafkas_formatters(tb, topic_name):
    """Kafka's OffsetsMessageFormatter and GroupMetadataMessageFormatter decode what weir serves
    as `__consumer_offsets` (tests/test_consumer_offsets_topic.py has the details): the
    committed offsets as OffsetFetch answers them, and the group's Stable membership."""
    b = tb.bootstrap
    rd_create_topic(b, topic_name, 2)
    group = f"tools-offsets-{uuid.uuid4().hex[:6]}"
    rd_produce(rd_producer(b), topic_name, [Msg(None, b"v", partition=p) for p in (0, 1) for _ in range(6)])
    c = rd_consumer(b, **{"group.id": group, "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        c.subscribe([topic_name])
        rd_poll(c, 12)
        c.commit(offsets=[TopicPartition(topic_name, 0, 3), TopicPartition(topic_name, 1, 5)],
                 asynchronous=False)
    finally:
        c.close()
    assert committed(b, group, topic_name, 2) == {0: 3, 1: 5}
    # kafka-topics describes it as Kafka's (DescribeTopicPartitions and DescribeConfigs).
    r = tool(TOPICS, "--bootstrap-server", b, "--describe", "--topic", "__consumer_offsets")
    head = lines(r.stdout)[0]
    assert "PartitionCount: 16\t" in head and "cleanup.policy=compact" in head, shown(r)

    def formatted(formatter: str) -> list[dict]:
        r = tool(CONSOLE_CONSUMER, "--bootstrap-server", b, "--topic", "__consumer_offsets",
                 "--from-beginning", "--timeout-ms", 8000, "--formatter",
                 f"org.apache.kafka.tools.consumer.{formatter}", ok=False)
        assert "Processed a total of" in r.stderr, shown(r)
        # One JSON object per record (the formatter prints them without a separator).
        out, text, decoder = [], r.stdout.strip(), json.JSONDecoder()
        while text:
            obj, end = decoder.raw_decode(text)
            out.append(obj)
            text = text[end:].lstrip()
        assert out, shown(r)
        return out

    offsets = {}
    for rec in formatted("OffsetsMessageFormatter"):
        key = rec["key"]["data"]
        if key["group"] == group:
            assert rec["value"]["version"] == 3, rec
            offsets[(key["topic"], key["partition"])] = rec["value"]["data"]["offset"]
    assert offsets == {(topic_name, 0): 3, (topic_name, 1): 5}, offsets

    groups = [rec for rec in formatted("GroupMetadataMessageFormatter")
              if rec["key"]["data"]["group"] == group and rec.get("value") not in (None, "NULL")]
    assert groups, "the group's membership was stored while it was Stable"
    g = groups[0]["value"]["data"]
    assert g["protocolType"] == "consumer" and g["generation"] >= 1 and len(g["members"]) == 1, g


# -- kafka-metadata-quorum, and kafka-topics on three brokers -------------------------------------


def test_topics_and_metadata_quorum_on_a_cluster(cluster):  # noqa: F811
    brokers = cluster
    b = ",".join(x.bootstrap for x in brokers)
    topic = f"tools-rf3-{uuid.uuid4().hex[:6]}"
    r = tool(TOPICS, "--bootstrap-server", b, "--create", "--topic", topic, "--partitions", 2,
             "--replication-factor", 3)
    assert r.stdout.strip() == f"Created topic {topic}.", shown(r)
    wait_for_topic(brokers[0].bootstrap, topic, 2, timeout=30)
    r = tool(TOPICS, "--bootstrap-server", b, "--describe", "--topic", topic)
    head, *parts = lines(r.stdout)
    assert "PartitionCount: 2\t" in head and "ReplicationFactor: 3\t" in head, shown(r)
    for ln in parts:
        fields = dict(re.findall(r"(\w+): ?([^\t]*)", ln))
        replicas = fields["Replicas"].split(",")
        # Per-core broker ids are node.id * 1024 + core: one replica on each of the three nodes.
        assert len(replicas) == 3 and sorted(int(x) // 1024 for x in replicas) == [1, 2, 3], ln
        assert fields["Leader"] in replicas and sorted(fields["Isr"].split(",")) == sorted(replicas), ln

    # The metadata quorum: the three voters (node ids 1-3), one of them its leader.
    r = tool(QUORUM, "--bootstrap-server", b, "describe", "--status", ok=False)
    assert r.returncode == 0, f"kafka-metadata-quorum describe --status: {shown(r)}"
    status = dict(re.findall(r"^(\w+):\s+(.*)$", r.stdout, re.M))
    assert status["LeaderId"] in ("1", "2", "3"), shown(r)
    assert sorted(int(v["id"]) for v in json.loads(status["CurrentVoters"])) == [1, 2, 3], shown(r)
    r = tool(QUORUM, "--bootstrap-server", b, "describe", "--replication", ok=False)
    assert r.returncode == 0, f"kafka-metadata-quorum describe --replication: {shown(r)}"
    rows = table(r.stdout, "NodeId")
    assert sorted(row["Status"] for row in rows if row["NodeId"] in ("1", "2", "3")) == [
        "Follower", "Follower", "Leader"], shown(r)

    # A rolling restart's wait (docs/operations.md): `--under-replicated-partitions` lists the
    # partitions with fewer replicas in sync than assigned — both while a broker is down, none
    # once it is back.
    def under_replicated(bootstrap: str) -> list[str]:
        r = tool(TOPICS, "--bootstrap-server", bootstrap, "--describe", "--under-replicated-partitions",
                 "--topic", topic)
        return lines(r.stdout)
    assert under_replicated(b) == [], "under-replicated partitions in a healthy cluster"
    brokers[2].stop()
    survivors = ",".join(x.bootstrap for x in brokers[:2])
    down = wait_until("both partitions under-replicated", lambda: (
        rows if len(rows := under_replicated(survivors)) == 2 else None), timeout=60.0)
    for ln in down:
        fields = dict(re.findall(r"(\w+): ?([^\t]*)", ln))
        assert sorted(int(x) // 1024 for x in fields["Isr"].split(",")) == [1, 2], ln
    brokers[2].start()
    everyone = ",".join(x.bootstrap for x in brokers)
    wait_until("no partition under-replicated", lambda: under_replicated(everyone) == [] or None, timeout=60.0)


# -- kafka-leader-election on three brokers ------------------------------------------------------


@pytest.mark.parametrize("cluster", [{"auto.leader.rebalance.enable": "false"}], indirect=True)
def test_leader_election_tool_moves_leaders_back_to_the_preferred_replicas(cluster):  # noqa: F811
    """A broker restarts: the partitions it led are led elsewhere and, with automatic
    rebalancing off, stay there. Kafka's `kafka-leader-election.sh --election-type PREFERRED`
    moves them back (docs/operations.md); asked again, it finds nothing to do."""
    from test_cluster_replication import isr_everywhere
    brokers = cluster
    b = ",".join(x.bootstrap for x in brokers)
    topic = f"tools-elect-{uuid.uuid4().hex[:6]}"
    tool(TOPICS, "--bootstrap-server", b, "--create", "--topic", topic, "--partitions", 3,
         "--replication-factor", 3)
    wait_for_topic(brokers[0].bootstrap, topic, 3, timeout=30)

    def described(bootstrap: str) -> dict[int, tuple[int, int]]:
        """partition -> (leader broker, preferred broker), from kafka-topics --describe."""
        out = {}
        for ln in lines(tool(TOPICS, "--bootstrap-server", bootstrap, "--describe", "--topic", topic).stdout)[1:]:
            f = dict(re.findall(r"(\w+): ?([^\t]*)", ln))
            out[int(f["Partition"])] = (int(f["Leader"]) // 1024, int(f["Replicas"].split(",")[0]) // 1024)
        return out

    for p in range(3):
        isr_everywhere(brokers, topic, p, {1, 2, 3})
    first = described(b)
    # The broker leading partition 0 restarts (a controlled shutdown hands its leaderships over).
    restarted = brokers[first[0][0] - 1]
    restarted.stop()
    restarted.start()
    b = ",".join(x.bootstrap for x in brokers)
    for p in range(3):
        isr_everywhere(brokers, topic, p, {1, 2, 3})
    time.sleep(2)
    before = described(b)
    off = sorted(p for p, (leader, preferred) in before.items() if leader != preferred)
    assert off, f"every partition is led by its preferred replica after the restart: {before}"

    r = tool(ELECTION, "--bootstrap-server", b, "--election-type", "PREFERRED", "--all-topic-partitions")
    said = re.search(r"Successfully completed leader election \(PREFERRED\) for partitions (.*)", r.stdout)
    assert said, shown(r)
    moved = {x.strip() for x in said.group(1).split(",")}
    assert {f"{topic}-{p}" for p in off} <= moved, shown(r)
    def all_preferred():
        d = described(b)
        return d if all(leader == preferred for leader, preferred in d.values()) else None
    after = wait_until("every partition led by its preferred replica", all_preferred, timeout=30.0)

    r = tool(ELECTION, "--bootstrap-server", b, "--election-type", "PREFERRED", "--topic", topic,
             "--partition", off[0])
    assert f"Valid replica already elected for partitions {topic}-{off[0]}" in r.stdout, shown(r)
    print(f"\nleaders (leader, preferred) after the restart {before}; after the tool {after}")

