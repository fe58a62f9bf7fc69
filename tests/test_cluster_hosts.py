"""Brokers on hosts of their own (network namespaces on a bridge, made by the test:
tests/net_hosts.py), each in its own rack (`broker.rack`), with Kafka's rack-aware replica
selector (`replica.selector.class`). `WEIR_HOST_BROKERS` brokers (3 in CI; 5 works too).

Follower fetching (KIP-392; docs/replication.md, "Follower fetching"):
- Metadata and DescribeCluster report each broker's rack.
- A librdkafka consumer with `client.rack` of a follower's rack reads a whole partition from
  that follower: the leader names it as the preferred read replica and serves no record bytes
  (its `weir_partition_bytes_out_total` stays 0), the follower serves them all. A consumer in
  the leader's rack, and one without a rack, read from the leader.
- The same for the Java consumer (kafka-clients, tests/java/clients RackConsumerTest).

`weir cluster describe` lists the brokers with their endpoints, racks and quorum membership,
and with one host off the network shows its replicas under-replicated and its metadata
replica lagging, until it is back.

Hosts failing under load (an idempotent acks=all librdkafka producer and a consumer, every
acknowledgement and read checked by tests/history.py), `WEIR_HOST_FAULT_CYCLES` rounds (1 in
CI) of:
1. the leader's host off the network (`ip link set eth0 down` inside it: clients and peers cut
   at once, as a pulled cable): the other brokers elect a leader and take writes again once
   the producer gives up on the silent host (its `socket.timeout.ms`, 10 s in these tests);
   back on the network, the old leader rejoins as a follower;
2. a follower's host, then the leader's, dropping 30% of the packets it receives for 8 s
   (iptables' `statistic` match inside the host: this kernel has no `tc netem`).
Nothing acknowledged is lost, no idempotent duplicate, every replica ends byte-identical; the
longest gap between acknowledgements per fault is printed (median and max over the rounds).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import threading
import time

import pytest
from confluent_kafka.admin import AdminClient

from clients import rd_consume, rd_produce, rd_producer, sample_messages
from conftest import WEIR_BIN
from history import History
from java_support import classpath
from net_hosts import host_cluster_fixture
from test_cluster_faults import consumer_loop, consumer_reached, producer_loop, read_whole
from test_cluster_metadata import NODE_ID_STRIDE, create, wait_until
from test_cluster_replication import high_watermark, leader_of, same_batches_everywhere
from test_java_clients import junit
from test_metrics import scrape, total

TOPIC = "racked"
RECORDS = 3000
CYCLES = int(os.environ.get("WEIR_HOST_FAULT_CYCLES", "1"))
BROKERS = int(os.environ.get("WEIR_HOST_BROKERS", "3"))
LOSS = 0.3


def rack(i: int) -> str:
    return f"rack-{i}"


@pytest.fixture
def hosts_cluster(request):
    yield from host_cluster_fixture(request, BROKERS, lambda i: {
        "broker.rack": rack(i),
        "replica.selector.class": "org.apache.kafka.common.replica.RackAwareReplicaSelector",
    })


def bytes_out(broker, topic: str, partition: int) -> float:
    return total(scrape(broker), "weir_partition_bytes_out_total", topic=topic, partition=partition)


def test_a_consumer_reads_from_the_replica_in_its_rack(hosts_cluster):
    hosts, cluster = hosts_cluster
    everyone = ",".join(b.bootstrap for b in cluster)

    # Every node is reported with its broker's rack.
    admin = AdminClient({"bootstrap.servers": everyone})
    nodes = admin.describe_cluster(request_timeout=30).result().nodes
    assert {(n.id // NODE_ID_STRIDE, n.rack) for n in nodes} == {(b.host, rack(b.host)) for b in cluster}

    create(cluster[0].bootstrap, TOPIC, 1, replication_factor=3)
    leader, _ = leader_of(cluster, TOPIC, 0)
    lead = cluster[leader // NODE_ID_STRIDE - 1]
    follower = next(b for b in cluster if b is not lead)
    other = next(b for b in cluster if b is not lead and b is not follower)
    msgs = sample_messages(RECORDS, 1)
    rd_produce(rd_producer(everyone, acks="all"), TOPIC, msgs)
    for b in cluster:
        assert bytes_out(b, TOPIC, 0) == 0

    got = rd_consume(everyone, TOPIC, [0], RECORDS, **{"client.rack": rack(follower.host)})
    assert [r.offset for r in got] == list(range(RECORDS))
    assert [r.value for r in got] == [m.value for m in msgs]
    served = {b.host: bytes_out(b, TOPIC, 0) for b in cluster}
    print(f"\nleader on host {lead.host}; client.rack={rack(follower.host)}: bytes served per host {served}")
    assert served[lead.host] == 0, "the leader served records to a consumer of another rack"
    assert served[other.host] == 0
    assert served[follower.host] > 0

    # In the leader's rack, or with no rack: the leader serves.
    for conf in ({"client.rack": rack(lead.host)}, {}):
        before = bytes_out(lead, TOPIC, 0)
        got = rd_consume(everyone, TOPIC, [0], RECORDS, **conf)
        assert [r.value for r in got] == [m.value for m in msgs]
        assert bytes_out(lead, TOPIC, 0) > before, f"{conf}: not read from the leader"
    assert bytes_out(follower, TOPIC, 0) == served[follower.host]


def test_a_java_consumer_reads_from_the_replica_in_its_rack(hosts_cluster):
    hosts, cluster = hosts_cluster
    everyone = ",".join(b.bootstrap for b in cluster)
    topic = "racked-java"
    create(cluster[0].bootstrap, topic, 1, replication_factor=3)
    leader, _ = leader_of(cluster, topic, 0)
    lead = cluster[leader // NODE_ID_STRIDE - 1]
    follower = next(b for b in cluster if b is not lead)
    junit(classpath("clients"), everyone, "RackConsumerTest",
          props={"weir.rack.topic": topic, "weir.rack": rack(follower.host), "weir.rack.records": "2000"})
    served = {b.host: bytes_out(b, topic, 0) for b in cluster}
    print(f"leader on host {lead.host}; client.rack={rack(follower.host)}: bytes served per host {served}")
    assert served[follower.host] > 0
    assert all(v == 0 for h, v in served.items() if h != follower.host), "read from another replica"


def ack_gap(acked_at: list, start: float, end: float) -> float:
    """The longest time without an acknowledgement between `start` and `end` (monotonic)."""
    times = [start] + sorted(t for t, _ in acked_at if start < t < end) + [end]
    return max(b - a for a, b in zip(times, times[1:]))


@pytest.mark.timeout(240 + 120 * CYCLES)
def test_hosts_off_the_network_or_lossy_lose_nothing_acknowledged(hosts_cluster, request):
    hosts, cluster = hosts_cluster
    everyone = ",".join(b.bootstrap for b in cluster)
    create(cluster[0].bootstrap, TOPIC, 1, replication_factor=len(cluster))
    leader, epoch = leader_of(cluster, TOPIC, 0)
    hist = History()
    stop_producer, stop_consumer = threading.Event(), threading.Event()
    fatal: list[str] = []
    consumer_errors: list[str] = []
    acked_at: list = []
    threads = [threading.Thread(target=producer_loop, daemon=True,
                                args=(hist, everyone, "idem", True, stop_producer, fatal, TOPIC, 1, acked_at)),
               threading.Thread(target=consumer_loop, daemon=True,
                                args=(hist, everyone, stop_consumer, consumer_errors, TOPIC, 1))]
    request.addfinalizer(lambda: (stop_producer.set(), stop_consumer.set()))
    for t in threads:
        t.start()
    faults: list[tuple[str, float, float]] = []  # (what, start, end of the window measured)
    events: list[str] = []
    try:
        time.sleep(3)
        for cycle in range(CYCLES):
            # The leader's host off the network: the others elect a leader; it comes back.
            lead = cluster[leader // NODE_ID_STRIDE - 1]
            t0 = time.monotonic()
            hosts.link_down(lead.host)
            others = [b for b in cluster if b is not lead]
            leader, epoch = leader_of(others, TOPIC, 0, epoch + 1)
            events.append(f"cycle {cycle}: host {lead.host} (the leader's) off the network; leader {leader} "
                          f"at epoch {epoch} named {time.monotonic() - t0:.2f}s after")
            wait_until("acknowledgements again after the cut", lambda: any(t > t0 + 1 for t, _ in acked_at),
                       timeout=60)
            time.sleep(3)
            hosts.link_up(lead.host)
            faults.append(("leader host off the network", t0, time.monotonic()))
            time.sleep(4)
            # A follower's host, then the leader's, dropping 30% of what they receive for 8 s.
            for role in ("follower", "leader"):
                lead = cluster[leader // NODE_ID_STRIDE - 1]
                victim = lead if role == "leader" else next(b for b in cluster if b is not lead)
                t0 = time.monotonic()
                hosts.lossy(victim.host, LOSS)
                time.sleep(8)
                hosts.lossy(victim.host, 0)
                leader, epoch = leader_of(cluster, TOPIC, 0, epoch)
                faults.append((f"{role} host dropping {LOSS:.0%} for 8 s", t0, time.monotonic() + 2))
                events.append(f"cycle {cycle}: {role} host {victim.host} lossy; leader {leader} at epoch {epoch} after")
                time.sleep(2)
    finally:
        for i in range(1, hosts.n + 1):
            hosts.link_up(i)
            hosts.lossy(i, 0)
        stop_producer.set()
        threads[0].join(90)

    ends = {0: high_watermark(everyone, TOPIC, 0)}
    consumer_reached(hist, ends)
    stop_consumer.set()
    threads[1].join(30)
    final = read_whole(cluster, everyone, TOPIC, ends)
    same_batches_everywhere(cluster, TOPIC, 0, ends[0])

    print("\n" + "\n".join(events))
    by_kind: dict[str, list[float]] = {}
    for what, a, b in faults:
        by_kind.setdefault(what, []).append(ack_gap(acked_at, a, b))
    for what, gaps in by_kind.items():
        print(f"{what}: longest gap between acknowledgements median {statistics.median(gaps):.2f}s, "
              f"max {max(gaps):.2f}s over {len(gaps)}")
    found = hist.check(final)
    failed = [a for a in hist.attempts.values() if a.error is not None]
    print(f"{len(hist.attempts)} sent, {len(hist.acked())} acknowledged, {len(failed)} failed "
          f"({sorted({a.error for a in failed})[:3]}); consumer errors {consumer_errors[:3]}; "
          f"idempotent duplicates {len(found['duplicate_idempotent'])}, lost {len(found['lost'])}")
    assert not fatal, f"the producer hit a fatal error: {fatal}"
    idem_timeouts = [a for a in failed if "TIMED_OUT" in (a.error or "")]
    kinds = ["lost", "divergence", "read_uncommitted", "non_monotonic", "unknown_value"]
    if not idem_timeouts:
        kinds.append("duplicate_idempotent")
    for kind in kinds:
        assert not found[kind], f"{kind}: {len(found[kind])}, e.g. {found[kind][:5]}"
    last_fault_end = max(b for _, _, b in faults)
    assert any(t > last_fault_end for t, _ in acked_at), "no acknowledgement after the last fault"


def describe(broker) -> dict:
    p = subprocess.run([str(WEIR_BIN), "cluster", "describe", "--json", "--bootstrap", broker.bootstrap],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, f"weir cluster describe: {p.returncode}\n{p.stdout}\n{p.stderr}"
    return json.loads(p.stdout)


def test_cluster_describe_shows_brokers_racks_quorum_and_lagging_replicas(hosts_cluster):
    hosts, cluster = hosts_cluster
    create(cluster[0].bootstrap, "described", 6, replication_factor=3)
    for p in range(6):
        leader_of(cluster, "described", p)
    d = describe(cluster[0])
    assert [(b["broker"], b["rack"], b["voter"]) for b in d["brokers"]] == \
        [(b.host, rack(b.host), True) for b in cluster]
    assert all({e.rsplit(":", 1)[0] for e in b["endpoints"]} == {b2.addr} for b, b2 in zip(d["brokers"], cluster))
    assert d["quorum"]["leader"] in {b.host for b in cluster}
    assert all(b["replicas"] >= 6 for b in d["brokers"]), d["brokers"]
    assert sum(b["leaders"] for b in d["brokers"]) == d["partitions"] and not d["without_leader"]
    assert not d["under_replicated"], d["under_replicated"]
    human = subprocess.run([str(WEIR_BIN), "cluster", "describe", "--bootstrap", cluster[0].bootstrap],
                           capture_output=True, text=True, timeout=60).stdout
    assert "BROKER" in human and rack(1) in human and "under-replicated: none" in human, human

    # A host off the network: its replicas fall out of the in-sync sets, and its metadata
    # replica lags behind the quorum's high watermark once the metadata moves.
    gone = next(b for b in cluster if b.host != d["quorum"]["leader"])
    hosts.link_down(gone.host)
    asked = next(b for b in cluster if b is not gone)
    create(asked.bootstrap, "described-later", 1, replication_factor=2)

    def degraded():
        d = describe(asked)
        lagging = {b["broker"]: b["log_end"] for b in d["brokers"]}
        described = [tp for tp in d["under_replicated"] if tp.startswith("described-")]
        return d if len(described) >= 6 and lagging[gone.host] < d["quorum"]["high_watermark"] else None
    d = wait_until("the cut-off broker's replicas under-replicated and its metadata lagging", degraded,
                   timeout=60)
    print(f"\nwith host {gone.host} off the network: {len(d['under_replicated'])} under-replicated")
    hosts.link_up(gone.host)
    wait_until("every replica in sync again", lambda: not describe(asked)["under_replicated"], timeout=60)
