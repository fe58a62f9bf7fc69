#!/usr/bin/env bash
# Runs kafka-python's own integration tests (test/integration of its sdist) against a fresh
# weir broker, the way its CI runs them against an external Kafka (KAFKA_URI).
#
#   scripts/kafka-python-suite.sh [PYTEST_ARGS...]     e.g. -k consumer, or node ids
#
# The sdist of the kafka-python pinned in scripts/requirements-test.txt is downloaded once with
# pip into $WEIR_KAFKA_PYTHON_CACHE (default ~/.cache/weir-kafka-python) and unpacked afresh
# for each run. The sdist lacks two files its tests import: test/__init__.py (without it
# `test` is the standard library's package) and test/service.py (the classes that run or stand
# for a broker process; with KAFKA_URI only ExternalService is used): both are written here.
# Its fixture also wants KAFKA_ROOT to be a directory (it is never used with KAFKA_URI).
#
# KAFKA_VERSION=4.1.0: the version kafka-python itself infers from weir's ApiVersions (Produce
# v13 is Kafka 4.1's), and the one that gates in every test written for Kafka 4.x (only
# test_kafka_consumer_offsets_for_time_old is gated out, for brokers < 0.10.1).
# weir is started as the suite's fixture starts Kafka: advertised.listeners set in its static
# configuration (host only, so the kernel still picks the port).
#
# WEIR_KAFKA_PYTHON_MODE=per-core (default, weir's default: each core advertised as a broker)
# or single (listeners.per.core=false: one broker, as the suite's fixture runs Kafka).
#
# scripts/kafka-python-suite.list names the tests that cannot apply (deselected, reason shown)
# and the known failures (strict xfail, cause and issue shown). A failed test is rerun once
# (see below) and, if it then passes, counted as flaky by name. A test gets 30 s (the slowest
# takes about 2 s) and its timeout fails that test only: the sdist's own addopts use pytest-timeout's
# "thread" method, which ends the whole pytest process, so one hung test lost the run (CI, stop 29:
# test_heartbeat_thread polled for an assignment that the lost subscription below never brings). Prints one count line; exits 1
# if any test failed twice, a known failure passed, or a test skipped itself.
# The broker is $WEIR_BIN (default target/release/weir); its log is kept in
# $KAFKA_PYTHON_SUITE_LOGS (default target/kafka-python-logs).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
REQS="$ROOT/scripts/requirements-test.txt"
VERSION="$(sed -n 's/^kafka-python==//p' "$REQS")"
CACHE="${WEIR_KAFKA_PYTHON_CACHE:-$HOME/.cache/weir-kafka-python}"
SDIST="$CACHE/kafka_python-$VERSION.tar.gz"
WEIR_BIN="${WEIR_BIN:-$ROOT/target/release/weir}"
LOGS="${KAFKA_PYTHON_SUITE_LOGS:-$ROOT/target/kafka-python-logs}"

# What its tests import: pytest (+ pytest-timeout, which its pyproject's addopts use) and the
# compression codecs (without them its compression tests skip themselves).
pins=()
for p in pytest pytest-timeout python-snappy cramjam lz4 zstandard; do
    pins+=("$(grep "^$p==" "$REQS")")
done
"$PYTHON" -m pip install -q --disable-pip-version-check --root-user-action=ignore "${pins[@]}"

if [ ! -f "$SDIST" ]; then
    mkdir -p "$CACHE"
    "$PYTHON" -m pip download -q --disable-pip-version-check --no-binary :all: --no-deps \
        -d "$CACHE" "kafka-python==$VERSION"
fi

WORK="$(mktemp -d)"
BROKER_PID=""
cleanup() {
    if [ -n "$BROKER_PID" ]; then kill "$BROKER_PID" 2>/dev/null; wait "$BROKER_PID" 2>/dev/null; fi
    rm -rf "$WORK"
}
trap cleanup EXIT

tar -xzf "$SDIST" -C "$WORK"
SRC="$WORK/kafka_python-$VERSION"
[ -d "$SRC/test/integration" ] || { echo "no test/integration in $SDIST" >&2; exit 1; }
: >"$SRC/test/__init__.py"
cat >"$SRC/test/service.py" <<'PY'
"""Written by weir's scripts/kafka-python-suite.sh: the sdist lacks test/service.py. With
KAFKA_URI the fixtures only use ExternalService (a broker someone else runs)."""


class ExternalService:
    def __init__(self, host, port):
        self.host = host
        self.port = port

    def open(self):
        pass

    def close(self):
        pass


class SpawnedService:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("this run uses an external broker (KAFKA_URI); it spawns none")
PY
mkdir -p "$WORK/kafka-root" "$LOGS"
: >"$WORK/weir.out"

MODE="${WEIR_KAFKA_PYTHON_MODE:-per-core}"
case "$MODE" in
    per-core) per_core=true ;;
    single) per_core=false ;;
    *) echo "WEIR_KAFKA_PYTHON_MODE must be per-core or single" >&2; exit 2 ;;
esac
"$WEIR_BIN" serve --listen 127.0.0.1:0 --advertised-listener 127.0.0.1 --data-dir "$WORK/data" \
    --set metrics.listen=127.0.0.1:0 --set listeners.per.core=$per_core \
    >"$WORK/weir.out" 2>"$LOGS/weir.log" &
BROKER_PID=$!
ADDR=""
for _ in $(seq 100); do
    ADDR="$(sed -n 's/^listening on //p' "$WORK/weir.out")"
    [ -n "$ADDR" ] && break
    sleep 0.1
done
[ -n "$ADDR" ] || { echo "weir did not start:" >&2; cat "$LOGS/weir.log" >&2; exit 1; }

run_pytest() {  # RESULT_JSON PYTEST_ARGS...
    local result="$1"; shift
    (cd "$SRC" && KAFKA_URI="PLAINTEXT://$ADDR" KAFKA_VERSION=4.1.0 KAFKA_ROOT="$WORK/kafka-root" \
        WEIR_KAFKA_PYTHON_LIST="$ROOT/scripts/kafka-python-suite.list" WEIR_KAFKA_PYTHON_MODE="$MODE" \
        WEIR_KAFKA_PYTHON_RESULT="$result" PYTHONPATH="$ROOT/scripts" \
        "$PYTHON" -m pytest -p kafka_python_suite_plugin -p no:cacheprovider --timeout 30 \
        --timeout-method signal -q -rfE "$@")
}
set +e
run_pytest "$WORK/pass1.json" test/integration "$@" >"$LOGS/pytest.out" 2>&1
set -e
[ -f "$WORK/pass1.json" ] || {
    tail -40 "$LOGS/pytest.out"
    echo "kafka-python suite: pytest did not finish (output: $LOGS/pytest.out)"
    exit 1
}
sed -n '/^=* \(not applicable\|known failures\)/,/^kafka-python suite: /p' "$LOGS/pytest.out" | grep -v '^kafka-python suite: ' || true
# A failed test runs once more, alone, on the same broker: kafka-python 3.0.12 loses a
# subscription made while its bootstrap Metadata request is in flight (the response clears
# the "update needed" flag; Java's KAFKA-7831), and its consumer then sees no partitions for
# the 5-minute metadata refresh. A test that passes on the rerun is counted as flaky, by name.
mapfile -t FAILED < <("$PYTHON" -c 'import json,sys; r=json.load(open(sys.argv[1])); print("\n".join(dict.fromkeys(r["failed"]+r["error"])))' "$WORK/pass1.json" | grep . || true)
if [ "${#FAILED[@]}" -gt 0 ]; then
    grep '^FAILED \|^ERROR ' "$LOGS/pytest.out" | sed 's/^/first run: /'
    set +e
    run_pytest "$WORK/pass2.json" "${FAILED[@]}" >"$LOGS/pytest-rerun.out" 2>&1
    set -e
    [ -f "$WORK/pass2.json" ] || echo '{"failed": [], "error": [], "passed": []}' >"$WORK/pass2.json"
fi
"$PYTHON" - "$MODE" "$LOGS" "$WORK/pass1.json" "$WORK/pass2.json" <<'PY'
import json, os, sys
mode, logs, p1 = sys.argv[1], sys.argv[2], json.load(open(sys.argv[3]))
p2 = json.load(open(sys.argv[4])) if os.path.exists(sys.argv[4]) else None
failed = list(dict.fromkeys(p1["failed"] + p1["error"] + p1["xpassed"]))
flaky = []
if p2 is not None:
    flaky = [t for t in failed if t in p2["passed"]]
    failed = [t for t in failed if t not in flaky]
for t in flaky:
    print(f"FLAKY (failed, passed on rerun) {t}")
for t in failed:
    print(f"FAILED {t}")
passed = len(set(p1["passed"])) + len(flaky)
print(f"kafka-python suite ({mode}): {passed} passed ({len(flaky)} on a rerun), {len(failed)} failed, "
      f"{len(p1['xfailed'])} known failures, {len(p1['deselected'])} not applicable, "
      f"{len(p1['skipped'])} skipped (output: {logs}/pytest.out, broker log: {logs}/weir.log)")
sys.exit(1 if failed or p1["skipped"] else 0)
PY
