"""Clusters of N brokers on their own loopback addresses, and network partitions between them
cut with iptables (docs/replication.md, "Network partitions with iptables").

Broker i (1-based) serves clients on 127.0.0.1 (port 0, as every test broker) and the other
brokers on 127.0.0.(i+1) — its entry in `controller.quorum.voters` — and its connections to
the other brokers leave from that address too (broker::peer::dial binds them). So the
traffic between brokers i and j is exactly the TCP packets between 127.0.0.(i+1) and
127.0.0.(j+1) to or from one of their two inter-broker ports, and two rules
`iptables -I OUTPUT -p tcp -s A -d B --dport PORT_B -j DROP` and `... --sport PORT_A ...`
(loopback packets pass OUTPUT) cut the link A -> B and nothing else: clients, on 127.0.0.1,
still reach every broker, and another cluster on the same addresses (other ports) is untouched. That is a real
partition — a leader alive for its clients but cut from its followers — which SIGSTOP cannot
give (a stopped leader answers nobody).

Every rule carries the comment `weir-test-<pid>` of the test process that added it, and is
removed by `Partitions.close` in the fixture's finalizer, which runs even when the test fails;
`close` also sweeps rules left by an earlier test process that died before its finalizer ran.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from conftest import TMP_ROOT, Broker, _new_workdir, close_brokers, free_port_run
from tls_certs import peer_tls_settings
from test_cluster_metadata import CORES, NODE_ID_STRIDE, metadata_v1, wait_until

RULE_TAG = f"weir-test-{os.getpid()}"
RULE_TAG_RE = re.compile(r"weir-test-(\d+)")


def host_of(i: int) -> str:
    """The inter-broker address of broker i (1-based)."""
    assert 1 <= i <= 5, "five brokers at most: 127.0.0.2-6"
    return f"127.0.0.{i + 1}"


def free_ports_on(hosts: list[str]) -> list[int]:
    socks = [socket.socket() for _ in hosts]
    try:
        for s, h in zip(socks, hosts):
            s.bind((h, 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def start_cluster(request, n: int, own_addresses: bool, peer_tls: bool = True,
                  settings: dict[str, str] | None = None, fixed_ports: bool = False,
                  binary: Path | None = None) -> list[Broker]:
    """n brokers, ids 1..n, each with its own inter-broker port named in every one's voters
    list; on 127.0.0.2.. with `own_addresses`, else all on 127.0.0.1. The brokers talk to each
    other over mutual TLS (`security.inter.broker.protocol=SSL`), each with a certificate for
    its inter-broker host from the test's cluster CA (`peer_tls=False`: PLAINTEXT, set
    explicitly); `settings` go to every broker. With `fixed_ports` each broker's client
    listener (and its per-core ports) stays where it was across restarts, as a real broker's
    does (librdkafka backs off reconnecting to a port that went away). Returns once every
    broker has registered (partitions are placed on registered brokers only). The caller's
    fixture must call `close_brokers(request, brokers)` at teardown. `binary`: the weir binary
    the brokers start with (default: the one under test)."""
    hosts = [host_of(i + 1) if own_addresses else "127.0.0.1" for i in range(n)]
    ports = free_ports_on(hosts)
    voters = ",".join(f"{i + 1}@{h}:{p}" for i, (h, p) in enumerate(zip(hosts, ports)))
    brokers: list[Broker] = []
    request.node._weir_brokers = brokers
    for i in range(n):
        workdir = _new_workdir(f"{request.node.name}-{i + 1}")
        security = (peer_tls_settings(TMP_ROOT, f"broker-{i + 1}-{workdir.name}", hosts[i]) if peer_tls
                    else {"security.inter.broker.protocol": "PLAINTEXT"})
        listener = {}
        if fixed_ports:
            taken = {int(b.settings["listeners"].rsplit(":", 1)[1]) for b in brokers}
            base = next(p for p in iter(lambda: free_port_run(CORES + 1), None)
                        if all(abs(p - t) > CORES for t in taken))
            listener = {"listeners": f"PLAINTEXT://127.0.0.1:{base}"}
        brokers.append(Broker(workdir, {"node.id": str(i + 1), "controller.quorum.voters": voters, **security,
                                        **listener, **(settings or {})}, cores=CORES))
        if binary is not None:
            brokers[-1].binary = binary
    for b in brokers:
        b.start()
    every_node = sorted(bid * NODE_ID_STRIDE + c for bid in range(1, n + 1) for c in range(CORES))
    wait_until(f"all {n} brokers registered", lambda: all(
        sorted(metadata_v1(b.bootstrap, [])[0]) == every_node for b in brokers), timeout=60.0)
    return brokers


def iptables_bin() -> str:
    """iptables, installed from Debian's package when missing (CI runs as root on Debian;
    scripts/test.sh installs it up front too). Never a skip: without it the test fails."""
    found = shutil.which("iptables")
    if found is None:
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
        subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "iptables"], check=True, env=env)
        found = shutil.which("iptables")
    assert found, "iptables could not be installed"
    return found


class Partitions:
    """Cuts and heals links between brokers of a cluster started with own addresses."""

    def __init__(self, brokers: list[Broker]):
        self.iptables = iptables_bin()
        self.brokers = brokers
        self.sweep(everything_of_dead_processes=True)

    def _run(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([self.iptables, "-w", *args], capture_output=True, text=True, timeout=30)

    def peer_address(self, b: Broker) -> tuple[str, int]:
        """b's inter-broker (host, port): its own entry in the voters list."""
        i = self.brokers.index(b) + 1
        entry = next(e for e in b.settings["controller.quorum.voters"].split(",") if e.startswith(f"{i}@"))
        host, port = entry.split("@")[1].rsplit(":", 1)
        assert host == host_of(i), f"broker {i} is not on its own address: {entry}"
        return host, int(port)

    def cut(self, a: Broker, b: Broker) -> None:
        """Drops every packet between a's and b's inter-broker sockets, both ways: to the
        other's inter-broker port (an outbound connection) and from one's own (the replies on
        the other's outbound connection)."""
        (ha, pa), (hb, pb) = self.peer_address(a), self.peer_address(b)
        for src, dst, sport, dport in ((ha, hb, pa, pb), (hb, ha, pb, pa)):
            for match in (["--dport", str(dport)], ["--sport", str(sport)]):
                rule = ["OUTPUT", "-p", "tcp", "-s", src, "-d", dst, *match, "-m", "comment", "--comment",
                        RULE_TAG, "-j", "DROP"]
                r = self._run("-I", *rule)
                assert r.returncode == 0, f"iptables -I {rule}: {r.stderr}"

    def isolate(self, b: Broker) -> None:
        """Cuts b off from every other broker; clients still reach it (and it them)."""
        for other in self.brokers:
            if other is not b:
                self.cut(b, other)

    def rules(self) -> list[str]:
        """This process's rules, as `iptables -S` prints them."""
        out = self._run("-S", "OUTPUT")
        assert out.returncode == 0, out.stderr
        return [line for line in out.stdout.splitlines() if RULE_TAG in line]

    def heal(self) -> None:
        """Removes every rule this test process added."""
        self.sweep()
        left = self.rules()
        assert not left, f"rules left after healing: {left}"

    def sweep(self, everything_of_dead_processes: bool = False) -> None:
        out = self._run("-S", "OUTPUT")
        assert out.returncode == 0, out.stderr
        for line in out.stdout.splitlines():
            m = RULE_TAG_RE.search(line)
            if m is None or not line.startswith("-A "):
                continue
            pid = int(m.group(1))
            if pid != os.getpid():
                if not everything_of_dead_processes or os.path.exists(f"/proc/{pid}"):
                    continue  # another live test process's rule
            self._run("-D", *line.split()[1:])

    def close(self) -> None:
        self.sweep()


@pytest.fixture
def partition_cluster(request):
    """Three brokers on 127.0.0.2-4 (inter-broker) and a `Partitions` to cut links between
    them; every rule is removed at teardown, pass or fail, before the brokers stop."""
    iptables_bin()  # installed before any broker starts
    net = None
    try:
        brokers = start_cluster(request, 3, own_addresses=True)
        net = Partitions(brokers)
        yield brokers, net
    finally:
        if net is not None:
            net.close()
        close_brokers(request, getattr(request.node, "_weir_brokers", []))
