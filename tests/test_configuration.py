"""Broker configuration from a file, flags and environment variables, in that precedence
(docs/configuration.md), read back through DescribeConfigs on the broker resource; bad
settings stop start-up with a message naming them."""

from __future__ import annotations

import os
import re
import subprocess
import time

from confluent_kafka.admin import ConfigResource, ResourceType

from clients import CLIENT_TIMEOUT_S, rd_admin
from conftest import WEIR_BIN

LISTENING = re.compile(rb"listening on 127\.0\.0\.1:(\d+)")


def run_broker(tmp_path, args: list[str], env: dict[str, str]):
    """Starts weir in tmp_path; returns (process, bootstrap) once it listens."""
    log = open(tmp_path / "weir.log", "wb")
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("WEIR_") or k == "WEIR_BIN"}
    full_env.update(env)
    proc = subprocess.Popen([str(WEIR_BIN), "serve", "--listen", "127.0.0.1:0",
                             "--set", "metrics.listen=127.0.0.1:0", *args], cwd=tmp_path,
                            stdout=log, stderr=subprocess.STDOUT, env=full_env)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        m = LISTENING.search((tmp_path / "weir.log").read_bytes())
        if m:
            return proc, f"127.0.0.1:{m.group(1).decode()}"
        assert proc.poll() is None, (tmp_path / "weir.log").read_text()
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("weir did not start:\n" + (tmp_path / "weir.log").read_text())


def broker_configs(bootstrap: str) -> dict[str, str]:
    admin = rd_admin(bootstrap)
    # One broker per core (listeners.per.core): they share one configuration.
    broker_id = min(admin.list_topics(timeout=10).brokers)
    [f] = admin.describe_configs([ConfigResource(ResourceType.BROKER, str(broker_id))]).values()
    return {name: e.value for name, e in f.result(CLIENT_TIMEOUT_S).items()}


def stop(proc):
    proc.terminate()
    assert proc.wait(30) == 0


def test_file_then_flags_then_environment(tmp_path):
    conf = tmp_path / "weir.properties"
    conf.write_text("# a comment\nnum.partitions=2\nlog.retention.ms=1000\nmessage.max.bytes=100000\n")
    cases = [
        ([], {}, {"num.partitions": "2", "log.retention.ms": "1000"}),
        (["--set", "num.partitions=3"], {}, {"num.partitions": "3", "log.retention.ms": "1000"}),
        (["--set", "num.partitions=3"], {"WEIR_NUM_PARTITIONS": "4", "WEIR_LOG_RETENTION_MS": "5000"},
         {"num.partitions": "4", "log.retention.ms": "5000"}),
    ]
    for flags, env, want in cases:
        proc, bootstrap = run_broker(tmp_path, ["--config", str(conf), *flags], env)
        try:
            got = broker_configs(bootstrap)
            assert {k: got[k] for k in want} == want, (flags, env, got)
            assert got["message.max.bytes"] == "100000"
        finally:
            stop(proc)


def test_bad_settings_stop_start_up_with_a_message(tmp_path):
    conf = tmp_path / "bad.properties"
    conf.write_text("num.partitions=2\nlog.retention.msec=5\n")
    cases = [
        (["--config", str(conf)], {}, "bad.properties:2: unknown setting 'log.retention.msec'"),
        (["--set", "num.partitions=many"], {}, "num.partitions: 'many' is not a valid number"),
        ([], {"WEIR_NUM_PARTITIONS": "0"}, "WEIR_NUM_PARTITIONS: num.partitions must be at least 1"),
    ]
    for args, env, message in cases:
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("WEIR_")}
        full_env.update(env)
        p = subprocess.run([str(WEIR_BIN), "serve", "--listen", "127.0.0.1:0",
                            "--set", "metrics.listen=127.0.0.1:0", *args], cwd=tmp_path,
                           capture_output=True, text=True, timeout=30, env=full_env)
        assert p.returncode == 1, (args, env, p.stderr[-2000:])
        assert message in p.stderr, (message, p.stderr[-2000:])
