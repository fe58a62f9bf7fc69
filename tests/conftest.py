"""Fixtures that run the real `weir` broker binary for the integration tests.

`broker` starts `target/release/weir serve --listen 127.0.0.1:0` in a fresh directory, so its data
lives in the default `./data` there, as for the README's first command (the
binary is built by scripts/test.sh; WEIR_BIN overrides the path), waits for its
`listening on 127.0.0.1:PORT` line and hands the test a `Broker` with:

    broker.bootstrap     "127.0.0.1:PORT" for the clients
    broker.restart()     SIGTERM, wait for a clean exit, start again on the same data dir
    broker.kill9()       SIGKILL, then start again on the same data dir
    broker.stop()        SIGTERM and wait (asserts a clean, timely exit)
    broker.ssl_bootstrap "127.0.0.1:PORT" of the SSL listener, when settings["listeners"] has one

`broker_factory(settings={...})` starts one with `--set key=value` settings.

The data dir lives under target/pytest-tmp/ — on the repository's own filesystem (ext4, so
O_DIRECT works), not tmpfs. The broker's stdout and stderr go to a log file beside it; when a
test fails, the log's tail is attached to the failure report. Every wait has a deadline, and
every test a pytest-timeout, so a hung broker fails a test instead of hanging CI.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
WEIR_BIN = Path(os.environ.get("WEIR_BIN", REPO / "target" / "release" / "weir"))
TMP_ROOT = REPO / "target" / "pytest-tmp"

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0
TEST_TIMEOUT_S = 180
LISTENING_RE = re.compile(rb"listening on (\d+\.\d+\.\d+\.\d+):(\d+)")
# Printed before the "listening on" line when metrics.listen is not off.
METRICS_RE = re.compile(rb"metrics on (http://\S+/metrics)")
# Printed before the "listening on" line, one per listener (`listeners=...,SSL://...`):
# "SSL listener on 127.0.0.1:PORT", "SASL_PLAINTEXT listener on ...".
LISTENER_RE = re.compile(rb"\b([A-Z_]+) listener on \d+\.\d+\.\d+\.\d+:(\d+)")
LOG_TAIL_BYTES = 64 * 1024
ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")


class BrokerError(AssertionError):
    pass


class Broker:
    """One weir process at a time on one data dir; restarts keep the data dir and the log."""

    def __init__(self, workdir: Path, settings: dict[str, str] | None = None, cores: int | None = None,
                 fixed_port: bool = False):
        self.workdir = workdir
        # fixed_port: the defaults a user gets (127.0.0.1:9092, metrics on 127.0.0.1:9644), not
        # port 0 — a restart must find its port free at once, as it does for a real service.
        self.fixed_port = fixed_port
        self.data_dir = workdir / "data"  # the default `./data`, relative to the broker's cwd
        self.log_path = workdir / "weir.log"
        self.settings = dict(settings or {})
        self.cores = cores
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None
        self.metrics_url: str | None = None
        self.ssl_port: int | None = None  # with an SSL listener in settings["listeners"]
        # Bound port of each listener by its name (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL).
        self.listener_ports: dict[str, int] = {}
        self.starts = 0
        # The weir binary the next start runs (a rolling upgrade swaps it between restarts).
        self.binary = WEIR_BIN
        self._stopped = False  # True once we stopped or killed it on purpose
        self._log = open(self.log_path, "ab", buffering=0)

    # -- lifecycle -------------------------------------------------------------------------

    def command(self) -> list[str]:
        cmd = [str(self.binary), "serve"]
        if not self.fixed_port and "listeners" not in self.settings:
            cmd += ["--listen", "127.0.0.1:0"]
        if "metrics.listen" not in self.settings and not self.fixed_port:
            # Many test brokers run at once: a free port each, not the default 9644.
            cmd += ["--set", "metrics.listen=127.0.0.1:0"]
        if self.cores is not None:
            cmd += ["--cores", str(self.cores)]
        for key, value in self.settings.items():
            cmd += ["--set", f"{key}={value}"]
        return cmd

    def start(self) -> "Broker":
        assert self.proc is None or self.proc.poll() is not None, "broker already running"
        if not self.binary.is_file():
            raise BrokerError(f"{self.binary} does not exist: run `cargo build --release` (scripts/test.sh does)")
        self.starts += 1
        self._stopped = False
        cmd = self.command()
        self._log.write(f"\n===== start #{self.starts}: {' '.join(cmd)}\n".encode())
        offset = self.log_path.stat().st_size
        env = dict(os.environ)
        env.setdefault("RUST_LOG", "info")
        env.setdefault("RUST_BACKTRACE", "1")
        env.setdefault("NO_COLOR", "1")
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=self.workdir,
            env=env,
        )
        self.port = self._wait_listening(offset)
        self._wait_connectable()
        return self

    def _wait_listening(self, offset: int) -> int:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                m = LISTENING_RE.search(f.read())
            if m:
                with open(self.log_path, "rb") as f:
                    f.seek(offset)
                    mm = METRICS_RE.search(f.read())
                self.metrics_url = mm.group(1).decode() if mm else None
                with open(self.log_path, "rb") as f:
                    f.seek(offset)
                    self.listener_ports = {name.decode(): int(port)
                                           for name, port in LISTENER_RE.findall(f.read())}
                self.ssl_port = self.listener_ports.get("SSL")
                return int(m.group(2))
            if self.proc.poll() is not None:
                self._stopped = True  # reported here, not again at teardown
                raise BrokerError(
                    f"weir exited with code {self.proc.returncode} before printing "
                    f"'listening on'\n{self.log_tail()}"
                )
            time.sleep(0.02)
        stacks = self.stacks()
        self._kill()
        raise BrokerError(f"weir did not print 'listening on 127.0.0.1:PORT' within {START_TIMEOUT_S}s\n"
                          f"{self.log_tail()}\n{stacks}")

    def _wait_connectable(self) -> None:
        deadline = time.monotonic() + 5.0
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1.0).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise BrokerError(f"weir said it listens on {self.port} but connect fails\n{self.log_tail()}")
                time.sleep(0.02)

    def stop(self, timeout: float = STOP_TIMEOUT_S, sig: int = signal.SIGTERM) -> None:
        """Graceful shutdown: SIGTERM (or `sig`), then the process must exit 0 within `timeout`."""
        if self.proc is None or self.proc.poll() is not None:
            self.check_alive()
            return
        self._stopped = True
        self.proc.send_signal(sig)
        name = signal.Signals(sig).name
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            stacks = self.stacks()
            self._kill()
            raise BrokerError(f"weir did not exit within {timeout}s of {name} (killed it)\n{self.log_tail()}\n{stacks}")
        self._log.write(f"===== exited with code {code} after {name}\n".encode())
        if code != 0:
            raise BrokerError(f"weir exited with code {code} after {name} (want 0)\n{self.log_tail()}")

    def restart(self) -> "Broker":
        self.stop()
        return self.start()

    def kill9(self) -> "Broker":
        """SIGKILL (no chance to flush or clean up), then start again on the same data dir."""
        self.check_alive()
        self._kill()
        self._log.write(b"===== killed with SIGKILL\n")
        return self.start()

    def _kill(self) -> None:
        self._stopped = True
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass

    def check_alive(self) -> None:
        """Fails if the broker died on its own (a crash is a bug whatever the test saw)."""
        if self.proc is not None and self.proc.poll() is not None and not self._stopped:
            raise BrokerError(f"weir died during the test with code {self.proc.returncode}\n{self.log_tail()}")

    def stacks(self) -> str:
        """Every thread's backtrace of a hung broker (gdb), for the failure report."""
        gdb = shutil.which("gdb")
        if gdb is None or self.proc is None or self.proc.poll() is not None:
            return "(no thread backtraces: gdb missing or process gone)"
        try:
            out = subprocess.run([gdb, "-p", str(self.proc.pid), "-batch", "-ex", "thread apply all bt 30"],
                                 capture_output=True, text=True, timeout=60).stdout
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"(gdb failed: {e})"
        lines = [ln for ln in out.splitlines() if ln.startswith(("Thread ", "#"))]
        return "--- weir thread backtraces ---\n" + "\n".join(lines)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    # -- handy facts ---------------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        assert self.port is not None, "broker not started"
        return f"127.0.0.1:{self.port}"

    @property
    def ssl_bootstrap(self) -> str:
        assert self.ssl_port is not None, "broker has no SSL listener"
        return f"127.0.0.1:{self.ssl_port}"

    def listener_bootstrap(self, name: str) -> str:
        """"127.0.0.1:PORT" of the listener `name` (e.g. "SASL_SSL")."""
        assert name in self.listener_ports, f"broker has no {name} listener: {self.listener_ports}"
        return f"127.0.0.1:{self.listener_ports[name]}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def rss_bytes(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def log_tail(self, limit: int = LOG_TAIL_BYTES) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - limit))
                text = f.read().decode("utf-8", "replace")
        except OSError as e:
            return f"(no broker log: {e})"
        cut = "(...)\n" if size > limit else ""
        text = ANSI_RE.sub("", text)
        return f"--- weir log {self.log_path} ---\n{cut}{text}--- end of weir log ---"

    def close(self) -> None:
        self._kill()
        self._log.close()


def free_port_run(n: int) -> int:
    """A port P with P, P+1, ..., P+n-1 all free on 127.0.0.1 now: a broker restarted on fixed
    ports keeps its addresses (weir's per-core listeners take the listener's port + 1 + core)."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + n > 65535:
            continue
        socks = []
        try:
            for port in range(base, base + n):
                t = socket.socket()
                socks.append(t)
                t.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for t in socks:
                t.close()
    raise AssertionError(f"no run of {n} free ports found")


def go_env() -> dict:
    """The environment of every Go build here: -mod=readonly (go.mod and go.sum are complete,
    and a build never rewrites them), no VCS stamping, no cgo."""
    return dict(os.environ, GOFLAGS="-mod=readonly -buildvcs=false", CGO_ENABLED="0")


def go_build(module_dir: Path, name: str, timeout: float = 600.0) -> Path:
    """Builds the Go program in `module_dir` into tests/go/.bin/`name` (go.mod and go.sum pin
    its modules, which come from the Go module proxy once, into Go's module cache)."""
    go = shutil.which("go")
    assert go, f"the Go toolchain (`go`) is needed to build {module_dir}"
    out_dir = REPO / "tests" / "go" / ".bin"
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / name
    proc = subprocess.run([go, "build", "-o", str(out), "."], cwd=module_dir, env=go_env(),
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"go build in {module_dir}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return out


# -- fixtures ------------------------------------------------------------------------------------


def _new_workdir(name: str) -> Path:
    TMP_ROOT.mkdir(parents=True, exist_ok=True)
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:60]
    return Path(tempfile.mkdtemp(prefix=f"{safe}-", dir=TMP_ROOT))


@pytest.fixture
def broker_factory(request):
    """Starts brokers with custom settings: broker_factory(settings={"num.partitions": 4})."""
    brokers: list[Broker] = []
    request.node._weir_brokers = brokers

    def make(settings: dict | None = None, cores: int | None = None, fixed_port: bool = False) -> Broker:
        b = Broker(_new_workdir(request.node.name), {k: str(v) for k, v in (settings or {}).items()}, cores,
                   fixed_port)
        brokers.append(b)
        return b.start()

    yield make
    close_brokers(request, brokers)


def close_brokers(request, brokers: list[Broker]) -> None:
    """A fixture's teardown: stops the brokers, keeps their directories if the test failed (or
    WEIR_TEST_KEEP is set), and fails a passing test whose broker died under it."""
    failed = getattr(request.node, "_weir_failed", False)
    errors = []
    for b in brokers:
        # A broker that crashed under a passing test still fails it.
        if b.proc is not None and b.proc.poll() is not None and not b._stopped:
            errors.append(f"weir died during the test with code {b.proc.returncode}\n{b.log_tail()}")
        b.close()
        if not failed and not errors and not os.environ.get("WEIR_TEST_KEEP"):
            shutil.rmtree(b.workdir, ignore_errors=True)
    if errors:
        pytest.fail("\n".join(errors), pytrace=False)


@pytest.fixture
def broker(broker_factory) -> Broker:
    """A weir broker with default settings in a fresh data dir."""
    return broker_factory()


@pytest.fixture
def topic_name(request) -> str:
    """A topic name unique to this test."""
    base = re.sub(r"[^A-Za-z0-9_-]+", "-", request.node.name)[:80].strip("-")
    return f"{base}-{uuid.uuid4().hex[:8]}"


# -- reporting and timeouts --------------------------------------------------------------------


def pytest_configure(config):
    # kafka-python 3.0 loads its protocol schemas with a deprecated importlib.resources call,
    # once per message type: hundreds of identical warnings that are not ours to fix.
    config.addinivalue_line("filterwarnings", r"ignore:(read_text|open_text) is deprecated:DeprecationWarning")


def pytest_collection_modifyitems(config, items):
    # Every test gets a deadline (pytest-timeout), unless it sets its own.
    for item in items:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(TEST_TIMEOUT_S))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        item._weir_failed = True
        for b in getattr(item, "_weir_brokers", []):
            report.sections.append((f"weir broker log ({b.workdir})", b.log_tail()))
