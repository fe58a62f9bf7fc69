#!/usr/bin/env bash
# Runs librdkafka's own integration tests (its tests/ test-runner) against a fresh weir broker.
#
#   scripts/librdkafka-suite.sh 0030 0102 0113:commit_during
#
# Each argument is a test number, optionally ":SUBTEST" (a substring of the subtest names,
# librdkafka's SUBTESTS). librdkafka's source, tests included, ships in the rdkafka-sys crate:
# it is fetched through a throwaway cargo project and built once into the cache
# ($WEIR_LIBRDKAFKA_CACHE, default ~/.cache/weir-librdkafka); reruns reuse the build.
# Needs cargo, gcc/g++, make, libssl-dev, zlib1g-dev. The broker is $WEIR_BIN (default
# target/release/weir). Prints one PASS/FAIL line per test and a count; exits 1 if any failed.
set -euo pipefail

RDKAFKA_SYS="4.10.0+2.12.1"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${WEIR_LIBRDKAFKA_CACHE:-$HOME/.cache/weir-librdkafka}"
SRC="$CACHE/src-${RDKAFKA_SYS#*+}"
WEIR_BIN="${WEIR_BIN:-$ROOT/target/release/weir}"
[ $# -gt 0 ] || { echo "usage: $0 TEST[:SUBTEST]..." >&2; exit 2; }

build() {
    mkdir -p "$CACHE"
    local proj="$CACHE/fetch"
    if [ ! -f "$proj/Cargo.toml" ]; then
        rm -rf "$proj"
        cargo new -q --vcs none "$proj"
        (cd "$proj" && cargo add -q "rdkafka-sys@=$RDKAFKA_SYS" --no-default-features)
    fi
    (cd "$proj" && cargo fetch -q)
    local crate
    crate="$(cd "$proj" && cargo metadata --format-version 1 \
        | python3 -c 'import json,sys; print(next(p["manifest_path"] for p in json.load(sys.stdin)["packages"] if p["name"]=="rdkafka-sys"))')"
    rm -rf "$SRC.tmp"
    cp -r "$(dirname "$crate")/librdkafka" "$SRC.tmp"
    (cd "$SRC.tmp" \
        && ./configure --disable-gssapi --disable-sasl --disable-zstd --disable-curl --disable-lz4-ext >configure.out 2>&1 \
        && make -j"$(nproc)" libs >make.out 2>&1 \
        && make -j"$(nproc)" -C tests build >>make.out 2>&1) \
        || { echo "building librdkafka failed; see $SRC.tmp/configure.out, make.out" >&2; exit 1; }
    rm -rf "$SRC" && mv "$SRC.tmp" "$SRC"
}
[ -x "$SRC/tests/test-runner" ] || build

WORK="$(mktemp -d)"
BROKER_PID=""
cleanup() {
    [ -n "$BROKER_PID" ] && kill "$BROKER_PID" 2>/dev/null && wait "$BROKER_PID" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT
"$WEIR_BIN" serve --listen 127.0.0.1:0 --data-dir "$WORK/data" --set metrics.listen=127.0.0.1:0 \
    >"$WORK/weir.out" 2>"$WORK/weir.log" &
BROKER_PID=$!
ADDR=""
for _ in $(seq 100); do
    ADDR="$(sed -n 's/^listening on //p' "$WORK/weir.out")"
    [ -n "$ADDR" ] && break
    sleep 0.1
done
[ -n "$ADDR" ] || { echo "weir did not start:" >&2; cat "$WORK/weir.log" >&2; exit 1; }
printf 'bootstrap.servers=%s\nbroker.address.family=v4\n' "$ADDR" >"$WORK/test.conf"

pass=0 fail=0
for spec in "$@"; do
    t="${spec%%:*}" sub=""
    [ "$spec" != "$t" ] && sub="${spec#*:}"
    mkdir -p "${LIBRDKAFKA_SUITE_LOGS:=$ROOT/target/librdkafka-logs}"
    log="$LIBRDKAFKA_SUITE_LOGS/librdkafka-$t${sub:+-$sub}.log"
    if (cd "$SRC/tests" && LD_LIBRARY_PATH="../src:../src-cpp" RDKAFKA_TEST_CONF="$WORK/test.conf" \
            TEST_KAFKA_VERSION=3.7.0 SUBTESTS="$sub" timeout 900 ./test-runner -D "$t" >"$log" 2>&1); then
        echo "PASS $spec"; pass=$((pass + 1))
    else
        echo "FAIL $spec (log: $log)"; grep -a -A2 "TEST FAILURE" "$log" | head -8 | sed 's/^/    /'
        fail=$((fail + 1))
    fi
done
echo "librdkafka suite: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
