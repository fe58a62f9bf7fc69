"""LinkedIn Burrow (the consumer-lag monitor) against a broker: install it, run it, read lag.

Burrow learns committed offsets by consuming `__consumer_offsets` (Kafka's binary key/value
records) and log-end offsets with ListOffsets, and serves both through its HTTP API. This
module runs Debian's package, Burrow 1.2.1 (the newest Burrow is not on the Go module proxy
here), built against Shopify/sarama 1.22.1.

    with Burrow(bootstrap="127.0.0.1:9092", workdir=tmp_path) as burrow:
        status = burrow.wait_for_group("g", timeout=30)["status"]
        burrow.topic_offsets("t")          # log-end offset per partition, [100, 100, 100]

What Burrow 1.2.1 sends (sarama 1.22.1, kafka-version "2.0.0"; identical for every accepted
kafka-version >= "1.0.0"; no ApiVersions request ever):

    Metadata (3)     v5   both clients, bootstrap and refresh
    ListOffsets (2)  v1   consumer module: where to start reading __consumer_offsets (oldest)
    Fetch (1)        v4   consumer module: reading __consumer_offsets (magic 2 batches)
    ListOffsets (2)  v0   cluster module: log-end offsets every offset-refresh seconds. Hard-coded
                          (`&sarama.OffsetRequest{}`), whatever kafka-version says, so a broker
                          without ListOffsets v0 (Apache Kafka 4) gives no lag at all.

Things to know (see also lag()):

* Burrow 1.2.1 cannot run without a [zookeeper] section: its ZooKeeper coordinator panics
  ("No Zookeeper servers specified") without servers, and is started first. It never needs a
  live ZooKeeper, though, if root-path is "/": then it creates no znode at startup, and the
  notifier (unused here: no notifier modules) fails to take its lock ("failed to get zk lock",
  "zk: invalid path", every 100 ms) without stopping anything else. So the config names a
  127.0.0.1 port that this module keeps bound but not listening (connection refused, nobody else
  can take it); Burrow's ZooKeeper client retries in the background once a second. log_tail()
  leaves both kinds of lines out.
* A committed offset is dropped unless the cluster module already knows the topic's log-end
  offsets ("dropped", reason "no topic", in the debug log), so a group committing to a topic created after
  Burrow started is only seen after the next topic refresh AND a later commit. Start Burrow after
  the topics exist (it reads __consumer_offsets from the oldest offset, so earlier commits are
  still found), or commit again after topic_refresh seconds.
* Offset values v0, v1 and v3 are decoded; v4 (flexible, newer Kafka) is not. Offset tombstones
  are ignored ("dropped tombstone"; a deleted group keeps being reported until expire-group). Group metadata (key v2) is only used
  for owners; value versions above 1 are logged as "failed to decode" and otherwise harmless.
* Latency: sarama 1.22.1 adds the partitions of __consumer_offsets to its fetch one at a time,
  about one per two Fetch round trips (MaxWaitTime 250 ms), so a group whose
  __consumer_offsets partition comes late is first seen up to ~0.5 s x partitions after start
  (~20-25 s for Kafka's 50; measured 1 s for partition 3, 15-17 s for partitions 43-46). Once
  subscribed, a new commit shows within ~0.3 s plus the evaluator cache (expire-cache, 1 s here,
  a 404 included). Hence wait_for_group's 60 s default.
* Apache Kafka 4.x does not work with it unaided: ListOffsets v0 is gone (Kafka closes the
  connection: "failed to fetch offsets from broker ... EOF") and Kafka 4.4 writes
  OffsetCommitValue v4 ("failed to decode ... value version 4"), so no group ever shows.
  weir serves ListOffsets v0 and writes OffsetCommitValue v3, which Burrow 1.2.1 reads.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

DEBIAN_PACKAGE = "burrow"
# The accepted values of Burrow 1.2.1 run from "0.8" to "2.1.0"; every one >= "1.0.0" makes sarama
# 1.22.1 send Metadata v5, Fetch v4 and ListOffsets v1 (older ones send Fetch v0-v3 and Metadata
# v0/v1; Fetch v3, "0.10.2", is closed by Kafka 4 and not served by weir). Burrow rejects anything
# newer than "2.1.0" ("Unknown Kafka Version").
KAFKA_VERSION = "2.0.0"
CLUSTER = "local"


class BurrowError(RuntimeError):
    pass


def _find_binary() -> str | None:
    # Debian's package installs /usr/bin/Burrow (capital B); `burrow` for other builds.
    for name in ("burrow", "Burrow"):
        path = shutil.which(name)
        if path:
            return path
    return "/usr/bin/Burrow" if os.access("/usr/bin/Burrow", os.X_OK) else None


def _apt(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    cmd = ["apt-get", *args]
    if os.geteuid() != 0:
        if not shutil.which("sudo"):
            raise BurrowError(f"installing Burrow needs root (or sudo): {' '.join(cmd)}")
        cmd = ["sudo", "-n", "env", "DEBIAN_FRONTEND=noninteractive", *cmd]
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


def _keep_service_stopped() -> None:
    """Debian's burrow.service (User=burrow, /etc/burrow/burrow.toml with example hosts, HTTP :8000)
    is neither enabled nor started by the package's postinst, but make sure it is not running if
    this host runs systemd: our processes use their own config dir, pidfile and ports."""
    if not (Path("/run/systemd/system").is_dir() and shutil.which("systemctl")):
        return
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    subprocess.run(sudo + ["systemctl", "disable", "--now", "burrow.service"],
                   capture_output=True, timeout=60)


def ensure_burrow() -> str:
    """The path of the Burrow binary, installing Debian's `burrow` package (1.2.1) if needed."""
    path = _find_binary()
    if path:
        return path
    if not shutil.which("apt-get"):
        raise BurrowError("Burrow is not installed and there is no apt-get to install it with")
    res = _apt(["install", "-y", "--no-install-recommends", DEBIAN_PACKAGE], timeout=600)
    if res.returncode != 0:
        # A fresh image has no package lists: update once, then try again.
        upd = _apt(["update"], timeout=600)
        if upd.returncode != 0:
            raise BurrowError(f"apt-get update failed:\n{upd.stdout[-2000:]}{upd.stderr[-2000:]}")
        res = _apt(["install", "-y", "--no-install-recommends", DEBIAN_PACKAGE], timeout=600)
        if res.returncode != 0:
            raise BurrowError(f"apt-get install {DEBIAN_PACKAGE} failed:\n"
                              f"{res.stdout[-2000:]}{res.stderr[-2000:]}")
    _keep_service_stopped()
    path = _find_binary()
    if not path:
        raise BurrowError(f"apt-get installed {DEBIAN_PACKAGE} but neither burrow nor Burrow is on PATH")
    return path


def _toml_str(s: str) -> str:
    return json.dumps(s)  # a JSON string is a valid TOML basic string


class Burrow:
    """One Burrow process with its own config dir, watching the broker at `bootstrap` as cluster
    "local". A context manager; stop() (or leaving the with block) kills it.

    offset_refresh: seconds between ListOffsets rounds (log-end offsets); topic_refresh: seconds
    between metadata refreshes (new topics); log_level: "debug" logs every offset read."""

    def __init__(self, bootstrap: str, workdir: Path, kafka_version: str = KAFKA_VERSION, *,
                 offset_refresh: int = 1, topic_refresh: int = 2, log_level: str = "info",
                 start_timeout: float = 60.0, binary: str | None = None):
        self.bootstrap = bootstrap
        self.servers = [s.strip() for s in bootstrap.split(",") if s.strip()]
        self.workdir = Path(workdir)
        self.kafka_version = kafka_version
        self.offset_refresh, self.topic_refresh = offset_refresh, topic_refresh
        self.log_level = log_level
        self.start_timeout = start_timeout
        self.binary = binary
        self.proc: subprocess.Popen | None = None
        self.url: str | None = None
        self.started_at: float | None = None  # time.monotonic() when ready
        self._zk_sock: socket.socket | None = None
        self.config_dir = self.workdir / "burrow-config"
        self.log_path = self.workdir / "burrow.log"
        self.out_path = self.workdir / "burrow.out"

    # -- lifecycle -----------------------------------------------------------------------------

    def __enter__(self) -> "Burrow":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _config(self, zk_port: int) -> str:
        servers = "[" + ", ".join(_toml_str(s) for s in self.servers) + "]"
        return f"""# written by tests/burrow_support.py for Burrow 1.2.1
[general]
pidfile = {_toml_str(str(self.workdir / "burrow.pid"))}

[logging]
filename = {_toml_str(str(self.log_path))}
level = {_toml_str(self.log_level)}
use-compression = false

# Required by Burrow 1.2.1 (its ZooKeeper coordinator panics without servers). Nothing listens
# on this port; with root-path "/" Burrow starts without ever reaching it.
[zookeeper]
servers = [{_toml_str(f"127.0.0.1:{zk_port}")}]
timeout = 6
root-path = "/"

[client-profile.weir]
client-id = "burrow-weir-test"
kafka-version = {_toml_str(self.kafka_version)}

[cluster.{CLUSTER}]
class-name = "kafka"
servers = {servers}
client-profile = "weir"
topic-refresh = {int(self.topic_refresh)}
offset-refresh = {int(self.offset_refresh)}

[consumer.{CLUSTER}]
class-name = "kafka"
cluster = "{CLUSTER}"
servers = {servers}
client-profile = "weir"
offsets-topic = "__consumer_offsets"
start-latest = false
group-blacklist = ""
group-whitelist = ""

[httpserver.default]
address = "127.0.0.1:0"

[storage.default]
class-name = "inmemory"
workers = 4
intervals = 10
expire-group = 604800
min-distance = 1

[evaluator.default]
class-name = "caching"
expire-cache = 1
"""

    def start(self) -> None:
        """Start Burrow and wait until it consumes __consumer_offsets. Burrow exits when its
        consumer module cannot start (e.g. __consumer_offsets has no leaders yet because Burrow's
        own Metadata request just auto-created it); such an exit is retried until start_timeout.
        The failed attempts' logs are kept as burrow.attempt<N>.log."""
        binary = self.binary or ensure_burrow()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config_dir.mkdir(parents=True, exist_ok=True)
        for stale in [self.log_path, self.out_path, self.workdir / "burrow.pid",
                      *self.workdir.glob("burrow.attempt*.log")]:
            stale.unlink(missing_ok=True)
        # A port bound but not listening: connections to it are refused for as long as we hold it.
        self._zk_sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._zk_sock.bind(("127.0.0.1", 0))
        (self.config_dir / "burrow.toml").write_text(self._config(self._zk_sock.getsockname()[1]))
        # Burrow reads BURROW_* environment variables as config overrides (viper AutomaticEnv).
        env = {k: v for k, v in os.environ.items() if not k.upper().startswith("BURROW_")}
        deadline = time.monotonic() + self.start_timeout
        attempt = 0
        try:
            while True:
                attempt += 1
                self.url = None
                self.proc = subprocess.Popen([binary, "-config-dir", str(self.config_dir)],
                                             cwd=self.workdir, env=env, stdin=subprocess.DEVNULL,
                                             stdout=open(self.out_path, "ab"), stderr=subprocess.STDOUT,
                                             start_new_session=True)
                if self._wait_started(deadline):
                    self.started_at = time.monotonic()
                    return
                # Exited during startup: keep its log, try again shortly.
                self.log_path.rename(self.workdir / f"burrow.attempt{attempt}.log")
                if time.monotonic() + 1 > deadline:
                    raise BurrowError(f"Burrow exited during startup {attempt} times within "
                                      f"{self.start_timeout} s (code {self.proc.returncode})"
                                      + self._tail_msg(self.workdir / f"burrow.attempt{attempt}.log"))
                time.sleep(1)
        except BaseException:
            self.stop()
            raise

    def _wait_started(self, deadline: float) -> bool:
        """True once Burrow consumes __consumer_offsets, False if it exited first."""
        # The HTTP server starts before the cluster and consumer modules; Burrow exits if they fail
        # (the broker unreachable, __consumer_offsets without leaders).
        while True:
            if self.proc.poll() is not None:
                return False
            log = self._read(self.log_path)
            if self.url is None:
                listener = self._started_listener(log)
                if listener:
                    self.url = f"http://{listener}"
            if self.url is not None and '"msg":"starting consumers"' in log:
                return True
            if time.monotonic() > deadline:
                what = ("its HTTP server did not start" if self.url is None
                        else "it did not start consuming __consumer_offsets")
                raise BurrowError(f"Burrow did not start within {self.start_timeout} s: {what}"
                                  + self._tail_msg())
            time.sleep(0.1)

    @staticmethod
    def _started_listener(log: str) -> str | None:
        for line in log.splitlines():
            if "started listener" in line:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if rec.get("msg") == "started listener" and rec.get("listener"):
                    return rec["listener"]
        return None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
            except ProcessLookupError:
                pass
        if self._zk_sock is not None:
            self._zk_sock.close()
            self._zk_sock = None

    def _check_alive(self, when: str) -> None:
        if self.proc is None:
            raise BurrowError("Burrow is not started")
        if self.proc.poll() is not None:
            raise BurrowError(f"Burrow exited (code {self.proc.returncode}) {when}" + self._tail_msg())

    # -- logs ----------------------------------------------------------------------------------

    @staticmethod
    def _read(path: Path) -> str:
        try:
            return path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    # Repeated every second (ZooKeeper client) and every 100 ms (notifier lock): see the module doc.
    NOISE = ("Failed to connect to 127.0.0.1:", "failed to get zk lock")

    def log_tail(self, lines: int = 60, path: Path | None = None) -> str:
        """The last lines of Burrow's log (zap JSON lines), without the ZooKeeper noise, and of
        its stdout/stderr."""
        path = path or self.log_path
        all_lines = self._read(path).splitlines()
        log = [ln for ln in all_lines if not any(n in ln for n in self.NOISE)][-lines:]
        noise = len(all_lines) - len([ln for ln in all_lines if not any(n in ln for n in self.NOISE)])
        text = f"--- {path} (last {len(log)} lines; {noise} ZooKeeper retry lines left out)\n" + "\n".join(log)
        out = self._read(self.out_path).splitlines()[-lines:]
        if out:
            text += f"\n--- {self.out_path} (last {len(out)} lines)\n" + "\n".join(out)
        return text

    def _tail_msg(self, path: Path | None = None) -> str:
        return "\n" + self.log_tail(path=path)

    # -- HTTP API ------------------------------------------------------------------------------

    def get(self, path: str, timeout: float = 10.0) -> dict | None:
        """GET a /v3 path: the parsed JSON, None on 404; BurrowError on anything else."""
        self._check_alive(f"before GET {path}")
        try:
            with urllib.request.urlopen(self.url + path, timeout=timeout) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise BurrowError(f"GET {path}: HTTP {e.code} {e.read()[:500]!r}" + self._tail_msg()) from e
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise BurrowError(f"GET {path}: {e}" + self._tail_msg()) from e

    @staticmethod
    def _q(name: str) -> str:
        return urllib.parse.quote(name, safe="")

    def lag(self, group: str) -> dict | None:
        """GET /v3/kafka/local/consumer/<group>/lag: the parsed JSON, None while Burrow does not
        know the group (404). body["status"] has "totallag", "partition_count", "status" ("OK",
        "WARN", ...) and "partitions": per partition "topic", "partition", "current_lag" (the
        last log-end offset Burrow fetched minus the last committed offset, 0 if negative) and
        "end" (the last commit: "offset", "timestamp", "lag" at commit time)."""
        return self.get(f"/v3/kafka/{CLUSTER}/consumer/{self._q(group)}/lag")

    def wait_for_group(self, group: str, timeout: float = 60.0, until=None) -> dict:
        """Poll lag(group) until Burrow reports it (and `until(body)` holds, if given); the body.
        On timeout BurrowError with the last answer and Burrow's log tail."""
        deadline = time.monotonic() + timeout
        last = None
        while True:
            last = self.lag(group)
            if last is not None and (until is None or until(last)):
                return last
            if time.monotonic() > deadline:
                raise BurrowError(f"Burrow did not report group {group!r} "
                                  f"{'as expected ' if until else ''}within {timeout} s; last answer: "
                                  f"{json.dumps(last)[:2000]}; groups known: {self.consumers()}"
                                  + self._tail_msg())
            time.sleep(0.25)

    def consumers(self) -> list[str]:
        body = self.get(f"/v3/kafka/{CLUSTER}/consumer")
        return body.get("consumers", []) if body else []

    def topics(self) -> list[str]:
        body = self.get(f"/v3/kafka/{CLUSTER}/topic")
        return body.get("topics", []) if body else []

    def topic_offsets(self, topic: str) -> list[int] | None:
        """The log-end offset of each partition of `topic` as Burrow last fetched them, None if
        Burrow does not know the topic."""
        body = self.get(f"/v3/kafka/{CLUSTER}/topic/{self._q(topic)}")
        return body.get("offsets") if body else None

    def consumer_detail(self, group: str) -> dict | None:
        """GET /v3/kafka/local/consumer/<group>: every stored commit per partition."""
        return self.get(f"/v3/kafka/{CLUSTER}/consumer/{self._q(group)}")


def committed(body: dict) -> dict[tuple[str, int], int]:
    """{(topic, partition): last committed offset} from a lag() body."""
    return {(p["topic"], p["partition"]): p["end"]["offset"]
            for p in body["status"]["partitions"] if p.get("end")}


def current_lag(body: dict) -> dict[tuple[str, int], int]:
    """{(topic, partition): current lag} from a lag() body."""
    return {(p["topic"], p["partition"]): p["current_lag"] for p in body["status"]["partitions"]}
