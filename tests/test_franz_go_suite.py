"""franz-go's own test suite (github.com/twmb/franz-go v1.22.3, pkg/kgo, and pkg/kadm v1.20.0)
against weir, as franz-go's CI runs it against Kafka: its integration tests take the seed
brokers from KGO_SEEDS, the replication factor of their topics from KGO_TEST_RF=1, and a SCRAM
listener and user from KGO_TEST_SCRAM_SEEDS and KGO_TEST_SCRAM.

The verdict for each of its tests is in tests/franz-go-suite.txt (run / known-fail / na /
local, with the reason). This file
- checks that the list names every Test and Fuzz function of the two test binaries exactly
  once (a franz-go upgrade that adds or renames tests fails here until the list is updated);
- runs every `run`, `known-fail` and `na` test of pkg/kgo against one weir broker (2 cores, one
  listener per core, plus a SASL_PLAINTEXT listener with a SCRAM user made by `weir user add`):
  `run` must pass, `known-fail` must fail and `na` must skip itself, so that a test changing
  state is noticed either way. A `run` test that fails in the parallel run is run once more,
  alone, against the same broker, and must pass then (printed as "passed when run again
  alone"), as scripts/kafka-python-suite.sh does with its suite. The one seen so far:
  Test848RegexBrokerResolves stops polling once it has seen as many topics as it wants,
  counting `__consumer_offsets` (not producible, so not among those it wants), which the
  other tests' commits fill while they run in parallel; it can stop before its second topic
  arrives ("did not consume from <prefix>-orders", once, in a local CI run on 2026-11-28,
  after passing in every run before).

What the `run` tests cover against weir: produce and consume in every shape franz-go has (acks,
compression, large records, manual partitions, purge, pause/resume, fetch sizes past the
broker's limits, pooling of buffers); consumer groups (range, roundrobin, sticky and
cooperative-sticky balancers, static membership) with members joining and leaving under load
while every record must be consumed once in order (TestGroupETL: a chain
of groups, each consuming and re-producing); the same chain with transactions, exactly-once
(TestTxnEtl: EndTxn, AddOffsetsToTxn, TxnOffsetCommit, read_committed, aborts); topics and
partitions created and deleted under live clients; SCRAM-SHA-256 login and its refusal.

Default: 100000 records through each ETL test (KGO_TEST_RECORDS; franz-go's own default, 500000,
took ~2.5 minutes of TestGroupETL and TestTxnEtl on 2 cores), about a minute against weir.
`WEIR_FRANZ_GO_FULL=1` runs franz-go's own record count and also the `local` tests (pkg/kgo's
unit tests and fuzz seeds, pkg/kadm's tests; about 10 s more), which must pass too.

`WEIR_FRANZ_GO_CLUSTER=1` adds a run against three brokers in one cluster (test_cluster_metadata's
`cluster` fixture) with franz-go's own default replication factor, 3 (KGO_TEST_RF unset), and
100000 records per ETL test (replicated, they take minutes): `run` tests must pass there too,
and so must TestConsumeRegex, whose known failure is a single broker's (a cluster has
`__consumer_offsets`); the SCRAM tests are left to the single broker. About 6 minutes.

Needs the Go toolchain; the first build fetches franz-go from the Go module proxy (about 30 s).
The go test output (test2json events) is kept in the broker's work dir as kgo-test.jsonl.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import WEIR_BIN, go_env
from test_cluster_metadata import cluster  # noqa: F401  (the three-broker fixture)

ROOT = Path(__file__).resolve().parent.parent
SUITE_LIST = ROOT / "tests" / "franz-go-suite.txt"
MODULE_DIR = ROOT / "tests" / "go" / "franz_go"
BIN_DIR = ROOT / "tests" / "go" / ".bin"  # in .gitignore
FULL = os.environ.get("WEIR_FRANZ_GO_FULL") == "1"
CLUSTER = os.environ.get("WEIR_FRANZ_GO_CLUSTER") == "1"
# Known failures of a single broker that a cluster does not have.
CLUSTER_PASSES = {"TestConsumeRegex"}
# Tests that need the single broker's SASL listener.
SINGLE_ONLY = {"TestSCRAMAuth", "TestSCRAMAuthBadCredentials"}
GO_BUILD_TIMEOUT_S = 600
RUN_TIMEOUT_S = 1800 if FULL else 330  # a normal default run takes 100-120 s here
PACKAGES = {"kgo": "github.com/twmb/franz-go/pkg/kgo", "kadm": "github.com/twmb/franz-go/pkg/kadm"}
SCRAM_USER, SCRAM_PASSWORD = "testuser", "testpass"
VERDICTS = ("run", "known-fail", "na", "local")


@pytest.fixture(scope="module")
def franz_go() -> dict[str, tuple[Path, Path]]:
    """{"kgo": (test binary, package source dir), "kadm": ...}, built with `go test -c` against
    tests/go/franz_go's go.mod and go.sum."""
    go = shutil.which("go")
    assert go, "the Go toolchain (`go`) is needed to build franz-go's tests"
    BIN_DIR.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, pkg in PACKAGES.items():
        binary = BIN_DIR / f"franz-go-{name}.test"
        proc = subprocess.run([go, "test", "-c", "-o", str(binary), pkg], cwd=MODULE_DIR, env=go_env(),
                              capture_output=True, text=True, timeout=GO_BUILD_TIMEOUT_S)
        assert proc.returncode == 0, f"go test -c {pkg}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        src = subprocess.run([go, "list", "-f", "{{.Dir}}", pkg], cwd=MODULE_DIR, env=go_env(),
                             capture_output=True, text=True, timeout=120)
        assert src.returncode == 0, src.stderr
        out[name] = (binary, Path(src.stdout.strip()))
    return out


def suite_list() -> dict[str, tuple[str, str]]:
    """NAME -> (verdict, why) from tests/franz-go-suite.txt (kadm's tests as "kadm/NAME")."""
    entries: dict[str, tuple[str, str]] = {}
    dups = []
    for n, line in enumerate(SUITE_LIST.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        name, _, rest = line.strip().partition(" ")
        verdict, _, why = rest.strip().partition(":")
        assert verdict in VERDICTS, f"{SUITE_LIST.name}:{n}: verdict {verdict!r} is not one of {VERDICTS}"
        assert verdict == "run" or why.strip(), f"{SUITE_LIST.name}:{n}: a {verdict} entry needs a reason"
        if name in entries:
            dups.append(name)
        entries[name] = (verdict, why.strip())
    assert not dups, f"named twice in {SUITE_LIST.name}: {dups}"
    return entries


def listed_tests(binary: Path) -> list[str]:
    proc = subprocess.run([str(binary), "-test.list", "^(Test|Fuzz)"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def test_the_list_names_every_franz_go_test_once(franz_go):
    entries = suite_list()
    tests = listed_tests(franz_go["kgo"][0]) + [f"kadm/{t}" for t in listed_tests(franz_go["kadm"][0])]
    assert len(tests) > 150, f"only {len(tests)} tests listed by the binaries"
    missing = sorted(set(tests) - set(entries))
    gone = sorted(set(entries) - set(tests))
    assert not missing and not gone, (f"{SUITE_LIST.name} does not match franz-go's tests: not listed {missing}; "
                                      f"listed but not in franz-go {gone}")


def run_tests(binary: Path, src: Path, names: list[str], env: dict, log: Path, timeout: float) -> dict[str, dict]:
    """Runs the named top-level tests through `go tool test2json`; {name: {"action", "elapsed",
    "output"}} for each top-level test that reported, plus "(binary)" with its exit code."""
    cmd = [shutil.which("go"), "tool", "test2json", "-t", str(binary), "-test.v=test2json", "-test.count=1",
           f"-test.timeout={int(timeout) - 30}s", "-test.run", "^(" + "|".join(re.escape(n) for n in names) + ")$"]
    results: dict[str, dict] = {}
    outputs: dict[str, list[str]] = {}
    with open(log, "w") as f:
        proc = subprocess.run(cmd, cwd=src, env=env, stdout=f, stderr=subprocess.STDOUT, timeout=timeout)
    for line in log.read_text(errors="replace").splitlines():
        try:
            ev = json.loads(line)
        except json.JSONDecodeError:
            outputs.setdefault("(binary)", []).append(line + "\n")
            continue
        test = ev.get("Test")
        if test is None:
            if ev.get("Action") == "output":
                outputs.setdefault("(binary)", []).append(ev.get("Output", ""))
            continue
        top = test.split("/")[0]
        if ev.get("Action") == "output":
            outputs.setdefault(top, []).append(ev.get("Output", ""))
        elif ev.get("Action") in ("pass", "fail", "skip") and "/" not in test:
            results[test] = {"action": ev["Action"], "elapsed": ev.get("Elapsed", 0.0)}
    for name, r in results.items():
        r["output"] = "".join(outputs.get(name, []))
    results["(binary)"] = {"action": f"exit {proc.returncode}", "output": "".join(outputs.get("(binary)", []))}
    return results


def excerpt(output: str, limit: int = 2500) -> str:
    """The lines that say why: franz-go's test lines (file.go:N: ...), panics, and the tail."""
    lines = output.splitlines()
    said = [ln for ln in lines if re.match(r"\s+\w+_test\.go:\d+:", ln) or "panic" in ln or ln.startswith("---")]
    text = "\n".join(said[-40:]) or "\n".join(lines[-40:])
    return text[-limit:]


@pytest.mark.timeout(GO_BUILD_TIMEOUT_S + RUN_TIMEOUT_S + 120)
def test_franz_go_suite_against_weir(franz_go, broker_factory):
    entries = suite_list()
    binary, src = franz_go["kgo"]
    b = broker_factory(settings={"listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0"}, cores=2)
    user = subprocess.run([str(WEIR_BIN), "user", "add", SCRAM_USER, "--mechanism", "SCRAM-SHA-256",
                           "--password-stdin", "--bootstrap", b.bootstrap],
                          input=SCRAM_PASSWORD + "\n", capture_output=True, text=True, timeout=30)
    assert user.returncode == 0, f"weir user add: {user.stdout}{user.stderr}"

    kgo_entries = {n: v for n, v in entries.items() if not n.startswith("kadm/")}
    selected = sorted(n for n, (verdict, _) in kgo_entries.items() if verdict != "local" or FULL)
    env = dict(os.environ, KGO_SEEDS=b.bootstrap, KGO_TEST_RF="1",
               KGO_TEST_SCRAM_SEEDS=b.listener_bootstrap("SASL_PLAINTEXT"),
               KGO_TEST_SCRAM=f"{SCRAM_USER}:{SCRAM_PASSWORD}")
    for var in ("KGO_TEST_OAUTH_SEEDS", "KGO_TEST_RECORDS", "KGO_TEST_CHAOS", "KGO_TEST_MAX_TOPIC_PARTS"):
        env.pop(var, None)
    if not FULL:
        # TestGroupETL and TestTxnEtl push franz-go's default 500,000 records through a chain of
        # groups: ~2.5 of the suite's ~3 minutes here. 100,000 (as the three-broker run uses)
        # keeps the rebalances mid-stream; WEIR_FRANZ_GO_FULL=1 runs the default.
        env["KGO_TEST_RECORDS"] = "100000"
    start = time.monotonic()
    results = run_tests(binary, src, selected, env, b.workdir / "kgo-test.jsonl", RUN_TIMEOUT_S)
    if FULL:
        kadm_bin, kadm_src = franz_go["kadm"]
        kadm = run_tests(kadm_bin, kadm_src, [n[5:] for n in entries if n.startswith("kadm/")], env,
                         b.workdir / "kadm-test.jsonl", 300)
        results.update({f"kadm/{n}": r for n, r in kadm.items() if n != "(binary)"})
    # A `run` test that failed beside the others gets one more run, alone.
    again = sorted(n for n, (verdict, _) in kgo_entries.items()
                   if verdict == "run" and results.get(n, {}).get("action") == "fail")
    passed_again = []
    if again:
        rerun = run_tests(binary, src, again, env, b.workdir / "kgo-rerun.jsonl", RUN_TIMEOUT_S)
        for n in again:
            if rerun.get(n, {}).get("action") == "pass":
                passed_again.append(n)
                results[n] = rerun[n]
    took = time.monotonic() - start
    b.check_alive()

    want = {"run": "pass", "known-fail": "fail", "na": "skip", "local": "pass"}
    problems = []
    for name in sorted(set(results) - {"(binary)"} - set(entries)):
        problems.append(f"{name}: not in {SUITE_LIST.name} (it {results[name]['action']}ed)")
    counts: dict[str, int] = {}
    for name, (verdict, why) in sorted(entries.items()):
        if verdict == "local" and not FULL:
            continue
        r = results.get(name)
        got = r["action"] if r else "did not report (the binary died or timed out)"
        counts[f"{verdict}: {got}"] = counts.get(f"{verdict}: {got}", 0) + 1
        if got != want[verdict]:
            hint = {"known-fail": "a known failure passes: update the list",
                    "na": "no longer skips itself: give it a verdict"}.get(verdict, "")
            problems.append(f"{name} ({verdict}{': ' + why if why else ''}): {got}, want {want[verdict]}"
                            f"{' — ' + hint if hint else ''}\n{excerpt(r['output']) if r else ''}")
    slowest = sorted(((r.get("elapsed", 0.0), n) for n, r in results.items() if n != "(binary)"), reverse=True)[:5]
    print(f"franz-go suite in {took:.0f} s ({'full' if FULL else 'default'}): {counts}; slowest {slowest}")
    if passed_again:
        print(f"failed beside the others, passed when run again alone: {passed_again}")
    if problems and results["(binary)"]["action"] != "exit 0":
        problems.append(f"test binary: {results['(binary)']['action']}\n{results['(binary)']['output'][-3000:]}")
    assert not problems, f"{len(problems)} franz-go tests not as listed ({counts}):\n\n" + "\n\n".join(problems)


@pytest.mark.timeout(GO_BUILD_TIMEOUT_S + 1800)
def franz_go_suite_against_three_brokers(franz_go, cluster):
    entries = suite_list()
    binary, src = franz_go["kgo"]
    selected = sorted(n for n, (verdict, _) in entries.items()
                      if verdict in ("run", "known-fail") and not n.startswith("kadm/") and n not in SINGLE_ONLY)
    env = dict(os.environ, KGO_SEEDS=",".join(b.bootstrap for b in cluster), KGO_TEST_RECORDS="100000")
    for var in ("KGO_TEST_RF", "KGO_TEST_SCRAM_SEEDS", "KGO_TEST_SCRAM", "KGO_TEST_OAUTH_SEEDS", "KGO_TEST_CHAOS",
                "KGO_TEST_MAX_TOPIC_PARTS"):
        env.pop(var, None)
    start = time.monotonic()
    results = run_tests(binary, src, selected, env, cluster[0].workdir / "kgo-test.jsonl", 1800)
    took = time.monotonic() - start
    for b in cluster:
        b.check_alive()
    problems, counts = [], {}
    for name in selected:
        verdict, why = entries[name]
        r = results.get(name)
        got = r["action"] if r else "did not report (the binary died or timed out)"
        want = "pass" if verdict == "run" or name in CLUSTER_PASSES else "fail"
        counts[f"{verdict}: {got}"] = counts.get(f"{verdict}: {got}", 0) + 1
        if got != want:
            problems.append(f"{name} ({verdict}): {got}, want {want}\n{excerpt(r['output']) if r else ''}")
    print(f"franz-go suite against three brokers in {took:.0f} s: {counts}")
    assert not problems, f"{len(problems)} franz-go tests not as listed against three brokers ({counts}):\n\n" + \
        "\n\n".join(problems)


if CLUSTER:  # collected only then (about 6 minutes), as librdkafka's WEIR_LIBRDKAFKA_FULL adds its 0113
    test_franz_go_suite_against_three_brokers = franz_go_suite_against_three_brokers

