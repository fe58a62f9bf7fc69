"""Brokers on hosts of their own: each in its own network namespace, with its own address on
a bridge, made by the test itself as root (docs/replication.md, "Network partitions with iptables", and
tests/cluster_net.py for the iptables cuts between loopback addresses).

`Hosts(n)` makes, for this test process (names carry its pid):
- a bridge `wb<pid>` in the root namespace with address 10.211.S.1/24 (S from the pid), where
  the test and its clients run;
- per host i (1-based) a namespace `weir-<pid>-h<i>` whose `eth0` (one end of a veth pair, the
  other end `wv<pid>h<i>` on the bridge) has 10.211.S.(10+i)/24, and whose loopback is up.

A broker on host i (`HostBroker`) runs under `ip netns exec`, with the fixed ports a real host
gives it — clients on ADDR:9092 (cores on 9093..), brokers on ADDR:9192, metrics on ADDR:9644 —
the same after every restart. `Hosts.link_down(i)` takes host i off the network (`ip link set
eth0 down` inside it: every link of that host cut at once, clients' and brokers' alike, as a
pulled cable), `link_up(i)` brings it back. `tc netem` (delay, loss) needs a kernel with
CONFIG_NET_SCH_NETEM; `Hosts.lossy(i, p)` makes a host drop a share of its packets with
iptables' `statistic` match inside the host's namespace instead, which any iptables kernel has.

`close()` deletes the namespaces (their veths go with them) and the bridge; it also sweeps
what a test process that died before its finalizer left behind.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time
from pathlib import Path

from conftest import TMP_ROOT, Broker, _new_workdir, close_brokers
from tls_certs import peer_tls_settings
from test_cluster_metadata import CORES, NODE_ID_STRIDE, metadata_v1, wait_until
from cluster_net import iptables_bin

CLIENT_PORT = 9092
PEER_PORT = 9192
METRICS_PORT = 9644
NS_RE = re.compile(r"^weir-(\d+)-h\d+\b")
BRIDGE_RE = re.compile(r"^\d+:\s+wb(\d+)[:@]")
VETH_RE = re.compile(r"^\d+:\s+(wv(\d+)h\d+)[:@]")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise AssertionError(f"ip {' '.join(args)}: exit {r.returncode}: {r.stderr.strip()}")
    return r


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


class Hosts:
    def __init__(self, n: int):
        assert 1 <= n <= 9, "nine hosts at most"
        self.pid = os.getpid()
        self.n = n
        self.subnet = f"10.211.{self.pid % 250}"
        self.bridge = f"wb{self.pid}"
        self.sweep()
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.subnet}.1/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for i in range(1, n + 1):
            ns, veth = self.ns(i), f"wv{self.pid}h{i}"
            _ip("netns", "add", ns)
            _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("link", "set", veth, "master", self.bridge)
            _ip("link", "set", veth, "up")
            _ip("-n", ns, "addr", "add", f"{self.addr(i)}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        # The bridge forwards once its ports are up (no STP delay: STP is off by default).
        for i in range(1, n + 1):
            self._wait_reachable(i)

    def ns(self, i: int) -> str:
        return f"weir-{self.pid}-h{i}"

    def addr(self, i: int) -> str:
        return f"{self.subnet}.{10 + i}"

    def _wait_reachable(self, i: int) -> None:
        """Until host i's address answers from the root namespace (a refused connection is an
        answer: the host's stack is there)."""
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection((self.addr(i), 1), timeout=0.5).close()
                return
            except ConnectionRefusedError:
                return
            except OSError:
                assert time.monotonic() < deadline, f"host {i} ({self.addr(i)}) unreachable"
                time.sleep(0.05)

    def exec_prefix(self, i: int) -> list[str]:
        return ["ip", "netns", "exec", self.ns(i)]

    def link_down(self, i: int) -> None:
        _ip("-n", self.ns(i), "link", "set", "eth0", "down")

    def link_up(self, i: int) -> None:
        _ip("-n", self.ns(i), "link", "set", "eth0", "up")
        self._wait_reachable(i)

    def lossy(self, i: int, probability: float) -> None:
        """Host i drops `probability` of the packets it receives (0: none; rules replaced)."""
        ipt = iptables_bin()
        subprocess.run(self.exec_prefix(i) + [ipt, "-F", "INPUT"], check=True)
        if probability > 0:
            subprocess.run(self.exec_prefix(i) + [ipt, "-A", "INPUT", "-i", "eth0", "-m", "statistic",
                                                  "--mode", "random", "--probability", str(probability),
                                                  "-j", "DROP"], check=True)

    def sweep(self) -> None:
        """Deletes this process's namespaces, veths and bridge, and those of test processes
        gone. The veths are deleted by name first: a deleted namespace takes its end of a
        pair with it only when the kernel gets round to it (namespace cleanup is deferred), and
        the next `Hosts` of this process must find the names free."""
        for line in _ip("-o", "link", "show", "type", "veth", check=False).stdout.splitlines():
            m = VETH_RE.match(line)
            if m and (int(m.group(2)) == self.pid or not _alive(int(m.group(2)))):
                _ip("link", "del", m.group(1), check=False)
        for line in _ip("netns", "list", check=False).stdout.splitlines():
            m = NS_RE.match(line)
            if m and (int(m.group(1)) == self.pid or not _alive(int(m.group(1)))):
                _ip("netns", "del", line.split()[0], check=False)
        for line in _ip("-o", "link", "show", "type", "bridge", check=False).stdout.splitlines():
            m = BRIDGE_RE.match(line)
            if m and (int(m.group(1)) == self.pid or not _alive(int(m.group(1)))):
                _ip("link", "del", f"wb{m.group(1)}", check=False)

    def close(self) -> None:
        self.sweep()


class HostBroker(Broker):
    """A broker on host i of `hosts`: `ip netns exec` into the host, fixed ports on its address."""

    def __init__(self, hosts: Hosts, i: int, workdir: Path, settings: dict[str, str], cores: int):
        self.hosts, self.host = hosts, i
        self.addr = hosts.addr(i)
        super().__init__(workdir, {"listeners": f"PLAINTEXT://{self.addr}:{CLIENT_PORT}",
                                   "metrics.listen": f"{self.addr}:{METRICS_PORT}", **settings}, cores=cores)

    def command(self) -> list[str]:
        return self.hosts.exec_prefix(self.host) + super().command()

    def _wait_connectable(self) -> None:
        deadline = time.monotonic() + 5.0
        while True:
            try:
                socket.create_connection((self.addr, self.port), timeout=1.0).close()
                return
            except OSError:
                assert time.monotonic() < deadline, f"broker on host {self.host} says it listens but connect fails"
                time.sleep(0.02)

    @property
    def bootstrap(self) -> str:
        assert self.port is not None, "broker not started"
        return f"{self.addr}:{self.port}"


def start_host_cluster(request, hosts: Hosts, settings_of=lambda i: {}) -> list[HostBroker]:
    """A broker on every host of `hosts`, ids 1..n, their peers talking mutual TLS on
    ADDR:9192; `settings_of(i)` adds settings to broker i. Returns once every broker has
    registered. The caller's fixture must call `close_brokers(request, brokers)`."""
    voters = ",".join(f"{i}@{hosts.addr(i)}:{PEER_PORT}" for i in range(1, hosts.n + 1))
    brokers: list[HostBroker] = []
    request.node._weir_brokers = brokers
    for i in range(1, hosts.n + 1):
        workdir = _new_workdir(f"{request.node.name}-host{i}")
        security = peer_tls_settings(TMP_ROOT, f"host-{i}-{workdir.name}", hosts.addr(i))
        brokers.append(HostBroker(hosts, i, workdir, {"node.id": str(i), "controller.quorum.voters": voters,
                                                      **security, **settings_of(i)}, cores=CORES))
    for b in brokers:
        b.start()
    every_node = sorted(i * NODE_ID_STRIDE + c for i in range(1, hosts.n + 1) for c in range(CORES))
    wait_until(f"all {hosts.n} brokers registered", lambda: all(
        sorted(metadata_v1(b.bootstrap, [])[0]) == every_node for b in brokers), timeout=60.0)
    return brokers


def host_cluster_fixture(request, n: int, settings_of=lambda i: {}):
    """Generator body of a fixture: hosts and brokers up, torn down (brokers first) after."""
    hosts = Hosts(n)
    try:
        yield hosts, start_host_cluster(request, hosts, settings_of)
    finally:
        try:
            close_brokers(request, getattr(request.node, "_weir_brokers", []))
        finally:
            hosts.close()
