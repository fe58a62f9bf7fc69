#!/usr/bin/env bash
# The whole test suite of weir: the one command the README gives, and what CI runs.
#
# On a fresh Debian machine (as root) it installs what it needs first — kcat, node and npm from
# Debian's packages, the pinned Python clients from scripts/requirements-test.txt — and then runs:
#   cargo fmt --check, cargo clippy -D warnings, a check that the default build needs only Rust,
#   cargo build --profile ci --features rdkafka (Cargo.toml: release with weir's own debug
#   assertions and overflow checks; every Rust step uses it), cargo test --workspace (and the storage tests
#   again with WEIR_TEST_OPEN_FILE_LIMIT=1),
#   pytest tests/ (the real `weir` binary driven by kcat, confluent-kafka, kafka-python, KafkaJS,
#   the Java client, Kafka Streams, Connect and MirrorMaker 2, Kafka's own tools (tests/java/*,
#   Maven projects resolved into ~/.m2 once), franz-go's own suite and sarama (Go modules)).
# Any failure stops it with a non-zero exit. Nothing is skipped: a missing tool is installed.
# When everything is already installed the install step costs about a second.
#
# Environment:
#   PYTHON=python3        the interpreter whose pip gets the test clients
#   PYTEST_ARGS="..."     extra arguments for pytest (e.g. "-k restart -x")
#   WEIR_CARGO_TEST_TIMEOUT_S, WEIR_PYTEST_TIMEOUT_S   deadlines (default 2400 s and 2700 s)
#   WEIR_TEST_SKIP_FUZZ=1 skip the fuzz smoke run (CI never sets it); WEIR_FUZZ_SECONDS=10
#   WEIR_TEST_SKIP_RUST=1 skip fmt/clippy/cargo test (the ci build still runs); for
#                         iterating on tests/ only — CI never sets it.
#   WEIR_LIBRDKAFKA_FULL=1 also run the whole of librdkafka's 0113 (about 14 minutes);
#                         WEIR_CRASH_CYCLES=300 the crash loop's long mode, WEIR_IDEMPOTENT_CYCLES
#                         and WEIR_TXN_CRASH_CYCLES those of the idempotent and transactional
#                         crash loops (all: never in CI)
#   WEIR_FRANZ_GO_FULL=1  franz-go's suite (tests/test_franz_go_suite.py, always run against one
#                         broker) with franz-go's own 500000 records per ETL test (CI: 100000)
#                         and its local tests too; WEIR_FRANZ_GO_CLUSTER=1 also on
#                         three brokers
#   WEIR_UPGRADE=1        upgrade tests: the previous release (scripts/previous-release, built from
#                         source into target/previous, ~5 minutes once) upgraded in place
#                         (tests/test_upgrade.py) and as a rolling upgrade of a 3-broker cluster under
#                         load (tests/test_cluster_rolling_restart.py); never in CI (the build)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)
# A CI build starts from nothing: incremental compilation only adds work to it.
if [ -n "${CI:-}" ]; then export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}; fi
PYTHON=${PYTHON:-python3}
START=$(date +%s)

step() { printf '\n==> [%4ss] %s\n' "$(($(date +%s) - START))" "$*"; }
die() { printf '\nFAILED: %s\n' "$*" >&2; exit 1; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# ---------------------------------------------------------------------------------------------
step "tools"
APT_UPDATED=0
apt_install() {
    export DEBIAN_FRONTEND=noninteractive
    if [ "$APT_UPDATED" = 0 ]; then
        as_root apt-get update -qq || die "apt-get update"
        APT_UPDATED=1
    fi
    as_root apt-get install -y -qq --no-install-recommends "$@" || die "apt-get install $*"
}

# kcat (Debian's package; the older name 'kafkacat' is the same tool).
if ! command -v kcat >/dev/null 2>&1; then
    if command -v kafkacat >/dev/null 2>&1; then
        :
    else
        apt_install kcat
    fi
fi
KCAT=$(command -v kcat || command -v kafkacat) || die "kcat is not installed"
export KCAT
echo "kcat: $KCAT ($("$KCAT" -V 2>&1 | head -n 1))"

# KafkaJS (tests/test_kafkajs.py) runs on node; its fixture `npm ci`s the version pinned in
# tests/kafkajs/package-lock.json into tests/kafkajs/node_modules (kept between runs).
command -v node >/dev/null 2>&1 || apt_install nodejs
command -v npm >/dev/null 2>&1 || apt_install npm
echo "node: $(node --version) | npm: $(npm --version 2>/dev/null)"

# librdkafka's own tests (tests/test_librdkafka_suite.py, scripts/librdkafka-suite.sh) are
# built from source: a C/C++ toolchain, make, OpenSSL, zlib and RapidJSON headers (RapidJSON:
# the tests that check the statistics JSON, 0053 and 0110, skip themselves without it).
for tool in gcc g++ make; do command -v $tool >/dev/null 2>&1 || apt_install build-essential; done
[ -f /usr/include/openssl/ssl.h ] || apt_install libssl-dev
[ -f /usr/include/zlib.h ] || apt_install zlib1g-dev
[ -f /usr/include/rapidjson/rapidjson.h ] || apt_install rapidjson-dev

# iptables: tests/test_cluster_partitions.py cuts links between brokers (tests/cluster_net.py).
command -v iptables >/dev/null 2>&1 || apt_install iptables
# ip (iproute2): tests/test_cluster_hosts.py puts brokers on hosts of their own (network
# namespaces, veth pairs, a bridge: tests/net_hosts.py).
command -v ip >/dev/null 2>&1 || apt_install iproute2

# gdb: a broker that hangs (start, stop) is reported with every thread's backtrace.
command -v gdb >/dev/null 2>&1 || apt_install gdb
# Burrow 1.2.1 (tests/test_burrow.py; the binary is /usr/bin/Burrow).
command -v Burrow >/dev/null 2>&1 || apt_install burrow

# `weir bench --client rdkafka` links librdkafka, which rdkafka-sys builds from source
# (cmake-build feature): cmake, a C toolchain and libcurl's headers.
command -v cmake >/dev/null 2>&1 || apt_install cmake
command -v cc >/dev/null 2>&1 && command -v make >/dev/null 2>&1 || apt_install build-essential
dpkg -s libcurl4-openssl-dev >/dev/null 2>&1 || apt_install libcurl4-openssl-dev

# Go: tests/test_sarama.py builds a producer with sarama (IBM/sarama, from the Go module proxy).
command -v go >/dev/null 2>&1 || apt_install golang-go
echo "go: $(go version)"

# Java and Maven: tests/java/* (kafka-clients, Kafka Streams, Connect, MirrorMaker 2 and Kafka's
# own command-line tools, 4.x from Maven Central into ~/.m2, through tests/java_support.py).
command -v java >/dev/null 2>&1 || apt_install default-jdk-headless
command -v mvn >/dev/null 2>&1 || apt_install maven
echo "java: $(java -version 2>&1 | head -n 1) | $(mvn -v 2>/dev/null | head -n 1 | sed 's/\x1b\[[0-9;]*m//g')"

command -v cargo >/dev/null 2>&1 || die "cargo is not on PATH (install a Rust toolchain first)"
cargo fmt --version >/dev/null 2>&1 || die "rustfmt is missing: rustup component add rustfmt"
cargo clippy --version >/dev/null 2>&1 || die "clippy is missing: rustup component add clippy"

command -v "$PYTHON" >/dev/null 2>&1 || apt_install python3
"$PYTHON" -m pip --version >/dev/null 2>&1 || apt_install python3-pip
echo "python: $("$PYTHON" --version 2>&1) at $(command -v "$PYTHON")"

# Install the pinned clients unless exactly those versions are already there.
REQS="$ROOT/scripts/requirements-test.txt"
if ! "$PYTHON" - "$REQS" <<'PY'
import sys
from importlib import metadata
ok = True
for line in open(sys.argv[1]):
    line = line.split("#", 1)[0].strip()
    if not line:
        continue
    name, want = line.split("==")
    try:
        have = metadata.version(name)
    except metadata.PackageNotFoundError:
        have = None
    if have != want:
        print(f"  {name}: want {want}, have {have}")
        ok = False
sys.exit(0 if ok else 1)
PY
then
    # PIP_BREAK_SYSTEM_PACKAGES: Debian's own python3 refuses pip installs otherwise (PEP 668).
    PIP_BREAK_SYSTEM_PACKAGES=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
        "$PYTHON" -m pip install -q --root-user-action=ignore -r "$REQS" \
        || die "pip install -r $REQS"
fi
"$PYTHON" -c 'import confluent_kafka, kafka, pytest, snappy, lz4, zstandard, prometheus_client, crc32c
print("confluent-kafka", confluent_kafka.__version__, "librdkafka", confluent_kafka.libversion()[0],
      "| kafka-python", kafka.__version__, "| pytest", pytest.__version__)'

# ---------------------------------------------------------------------------------------------
if [ "${WEIR_TEST_SKIP_RUST:-0}" != 1 ]; then
    step "cargo fmt --all -- --check"
    cargo fmt --all -- --check || die "cargo fmt: run 'cargo fmt --all'"

    step "cargo clippy --all-targets -- -D warnings"
    # --profile ci (Cargo.toml: release with weir's own debug assertions and overflow checks),
    # as every build below: rdkafka-sys's build script (librdkafka built with cmake, minutes)
    # runs once for all of them, and the dependencies are compiled once.
    cargo clippy --profile ci --workspace --all-targets --features rdkafka -- -D warnings \
        || die "cargo clippy --features rdkafka"
    # Without default features: the code compiled only without rdkafka and without
    # tiered-storage (the fuzz crate's build of the library and src/broker/tier_off.rs).
    cargo clippy --profile ci --workspace --all-targets --no-default-features -- -D warnings \
        || die "cargo clippy --no-default-features (the fuzz crate builds the library so)"
fi

step "the default build needs only Rust (scripts/check_default_build.sh)"
bash "$ROOT/scripts/check_default_build.sh" || die "scripts/check_default_build.sh"


step "source tree shape (scripts/check_layers.py: no import cycles, long files say why)"
"$PYTHON" "$ROOT/scripts/check_layers.py" || die "scripts/check_layers.py"

step "cargo build --profile ci --features rdkafka"
# With librdkafka linked: tests/test_bench.py runs `weir bench --client rdkafka`. The ci
# profile is the release build plus weir's own debug assertions and overflow checks
# (Cargo.toml): the broker the tests drive is target/ci/weir.
cargo build --profile ci --features rdkafka || die "cargo build --profile ci --features rdkafka"
[ -x "$ROOT/target/ci/weir" ] || die "target/ci/weir was not built"

if [ "${WEIR_TEST_SKIP_RUST:-0}" != 1 ]; then
    step "cargo test --workspace"
    # A deadline, so that a hung test fails the run instead of eating CI's whole budget.
    timeout -k 30 "${WEIR_CARGO_TEST_TIMEOUT_S:-2400}" cargo test --profile ci --features rdkafka --workspace \
        || die "cargo test --workspace (exit $?; 124 = timed out)"
    step "storage tests again with one open file per thread (WEIR_TEST_OPEN_FILE_LIMIT=1)"
    # --workspace, as above: `-p weir-storage` alone resolves its dependencies' features
    # differently and rebuilds the crate and every test binary (1.5 minutes); the broker's
    # own tests run again too (seconds; they do not read the variable).
    WEIR_TEST_OPEN_FILE_LIMIT=1 timeout -k 30 900 cargo test --profile ci --features rdkafka --workspace --tests \
        || die "storage tests with one open file per thread (exit $?)"
    step "cargo test --bench broker_path (a smoke run of the broker-path benchmark)"
    timeout -k 30 600 cargo test --profile ci --features rdkafka --bench broker_path || die "benches/broker_path.rs smoke run"
fi

# ---------------------------------------------------------------------------------------------
step "pytest tests/"
export WEIR_BIN="$ROOT/target/ci/weir"
# pytest exits 5 when it collected no test: that is a failure here too (set -e sees non-zero).
# Every test's duration is in target/pytest-report.xml (JUnit XML): where CI's time goes.
# shellcheck disable=SC2086
timeout -k 30 "${WEIR_PYTEST_TIMEOUT_S:-2700}" \
    "$PYTHON" -m pytest "$ROOT/tests" -v -ra --durations=30 -p no:cacheprovider \
    --junitxml="$ROOT/target/pytest-report.xml" ${PYTEST_ARGS:-} \
    || die "pytest (exit $?; 5 = no tests collected, 124 = timed out)"

# ---------------------------------------------------------------------------------------------
# A few seconds per cargo-fuzz target (request frames, record batches, index entries, segment
# recovery) plus a replay of past findings (fuzz/found/); installs cargo-fuzz if missing.
# WEIR_FUZZ_SECONDS (default 10) per target; WEIR_TEST_SKIP_FUZZ=1 skips it when iterating.
if [ "${WEIR_TEST_SKIP_FUZZ:-0}" != 1 ]; then
    step "fuzz smoke (scripts/fuzz-smoke.sh)"
    FUZZ_SECONDS=${WEIR_FUZZ_SECONDS:-10} timeout -k 30 1200 "$ROOT/scripts/fuzz-smoke.sh" \
        || die "fuzz smoke (exit $?; 124 = timed out)"
fi

step "all tests passed"
