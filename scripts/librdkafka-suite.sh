#!/usr/bin/env bash
# Runs librdkafka's own integration tests (its tests/ test-runner) against fresh weir brokers.
#
#   scripts/librdkafka-suite.sh 0030 0102 0113:commit_during   # chosen tests, one after another
#   scripts/librdkafka-suite.sh sasl/0135 sasl/0142:message    # against a SASL_PLAINTEXT broker
#   scripts/librdkafka-suite.sh cluster/0103 cluster-noautocreate/0107   # against 3 brokers
#   scripts/librdkafka-suite.sh consumer/0153 consumer/0113                # group.protocol=consumer
#   scripts/librdkafka-suite.sh --all [--jobs N] [--local]     # the whole list, in parallel
#
# [sasl/]TEST[:SUBTEST]: a test number, optionally with a substring of the subtest names
# (librdkafka's SUBTESTS); sasl/ runs it against a broker whose clients log in with
# SCRAM-SHA-256 on a SASL_PLAINTEXT listener, with connections.max.reauth.ms=10000; cluster/
# against three brokers in one cluster (node ids 1-3, one advertised broker each, as librdkafka's
# 3-broker test cluster: its tests that create topics with replication factor 3);
# cluster-noautocreate/ the same with topic auto-creation off, for the tests of librdkafka's
# "noautocreate" scenario; cluster-racks/ three brokers in racks RACK1-3 with Kafka's
# rack-aware replica selector, for follower fetching (KIP-392); consumer/ against the default
# broker with the test-runner's consumers on KIP-848's protocol (TEST_CONSUMER_GROUP_PROTOCOL=
# consumer: group.protocol=consumer, librdkafka's own switch for its KIP-848 runs). --all
# runs every `run` entry of tests/librdkafka-suite.txt, the list that gives every test of
# librdkafka's test table a verdict (run / na / known-fail / local, with the
# reason), N test-runner processes at a time (default $WEIR_LIBRDKAFKA_JOBS or 4), and prints
# pass / fail / na / known-fail / local counts; --local also runs the `local` entries (tests
# of librdkafka alone or against its in-process mock cluster: they say nothing about weir).
# --all checks the list against the test table first, so a librdkafka upgrade that adds or
# renames tests fails until the list says what to do with them.
#
# librdkafka's source, tests included, ships in the rdkafka-sys crate: it is fetched through a
# throwaway cargo project and built once into the cache ($WEIR_LIBRDKAFKA_CACHE, default
# ~/.cache/weir-librdkafka); reruns reuse the build. Needs cargo, gcc/g++, make, libssl-dev,
# zlib1g-dev, rapidjson-dev. The broker is $WEIR_BIN (default target/release/weir), set up as
# librdkafka's "default" test scenario sets up its cluster (auto-created topics,
# num.partitions=4).
# Logs: $LIBRDKAFKA_SUITE_LOGS (default target/librdkafka-logs), one per test-runner and one
# per broker. Exits 1 if any test that must pass did not.
set -euo pipefail

RDKAFKA_SYS="4.10.0+2.12.1"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${WEIR_LIBRDKAFKA_CACHE:-$HOME/.cache/weir-librdkafka}"
# -b2: the build recipe's version (b2 = with RapidJSON); a new recipe builds afresh.
SRC="$CACHE/src-${RDKAFKA_SYS#*+}-b2"
WEIR_BIN="${WEIR_BIN:-$ROOT/target/release/weir}"
LIST="$ROOT/tests/librdkafka-suite.txt"
LOGS="${LIBRDKAFKA_SUITE_LOGS:-$ROOT/target/librdkafka-logs}"
KAFKA_VERSION=3.7.0 # the Kafka whose protocol versions weir matches; gates version-bound tests

usage() { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
ALL=0 LOCAL=0 JOBS="${WEIR_LIBRDKAFKA_JOBS:-4}" SPECS=()
while [ $# -gt 0 ]; do
    case "$1" in
        --all) ALL=1 ;;
        --local) LOCAL=1 ;;
        --jobs) JOBS="$2"; shift ;;
        -h | --help) usage ;;
        -*) usage ;;
        *) SPECS+=("$1") ;;
    esac
    shift
done
[ "$ALL" = 1 ] || [ ${#SPECS[@]} -gt 0 ] || usage

build() {
    [ -f /usr/include/rapidjson/rapidjson.h ] || { echo "install rapidjson-dev first" >&2; exit 1; }
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
    # The build log stays outside the tree: mklove's configure loads every ./configure.* file
    # as a module, so a log named configure.out there makes it fail.
    local blog="$CACHE/build.log"
    (cd "$SRC.tmp" \
        && ./configure --disable-gssapi --disable-sasl --disable-zstd --disable-curl --disable-lz4-ext \
        && grep -q 'WITH_RAPIDJSON 1' config.h \
        && make -j"$(nproc)" libs \
        && make -j"$(nproc)" -C tests build) >"$blog" 2>&1 \
        || { echo "building librdkafka failed; see $blog" >&2; exit 1; }
    rm -rf "$SRC" && mv "$SRC.tmp" "$SRC"
}
[ -x "$SRC/tests/test-runner" ] || build

WORK="$(mktemp -d)"
BROKER_PIDS=()
cleanup() {
    for pid in "${BROKER_PIDS[@]}"; do
        kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    done
    rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -p "$LOGS"

# start_weir NAME [--set K=V ...]: a broker on port 0 (later --set listeners=... wins);
# writes $WORK/NAME.conf for test-runner with the first listener as bootstrap.
start_weir() {
    local name="$1"
    shift
    # Created before the broker starts: the wait loop's sed must not race the redirection (a
    # missing file made sed fail, and set -e end the script with "weir did not start" unsaid).
    : >"$WORK/$name.out"
    "$WEIR_BIN" serve --set listeners=127.0.0.1:0 --data-dir "$WORK/$name" --set metrics.listen=127.0.0.1:0 \
        --set num.partitions=4 "$@" >"$WORK/$name.out" 2>"$LOGS/weir-$name.log" &
    BROKER_PIDS+=($!)
    local addr=""
    for _ in $(seq 100); do
        addr="$(sed -n 's/^listening on //p' "$WORK/$name.out")"
        [ -n "$addr" ] && break
        sleep 0.1
    done
    [ -n "$addr" ] || { echo "weir did not start:" >&2; cat "$LOGS/weir-$name.log" >&2; exit 1; }
    printf 'bootstrap.servers=%s\nbroker.address.family=v4\n' "$addr" >"$WORK/$name.conf"
}

# start_weir_sasl NAME: a broker whose test-runner clients log in (SCRAM-SHA-256 on a
# SASL_PLAINTEXT listener; the user is made over its loopback PLAINTEXT listener).
start_weir_sasl() {
    local name="$1"
    start_weir "$name" --set listeners=SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0 \
        --set connections.max.reauth.ms=10000
    local admin
    admin="$(sed -n 's/^PLAINTEXT listener on //p' "$WORK/$name.out")"
    echo "librdkafka-test-pw" | "$WEIR_BIN" user add librdkafka --password-stdin \
        --bootstrap "$admin" >/dev/null
    printf '%s\n' security.protocol=SASL_PLAINTEXT sasl.mechanism=SCRAM-SHA-256 \
        sasl.username=librdkafka sasl.password=librdkafka-test-pw >>"$WORK/$name.conf"
}

# start_weir_cluster NAME [--set K=V ...]: three brokers (NAME-1..3, node ids 1-3) in one
# cluster, each advertising one broker (no per-core listeners); writes $WORK/NAME.conf with the
# three as bootstrap once each broker has seen all three register (a topic with replication
# factor 3 needs them).
start_weir_cluster() {
    local name="$1" voters="" addrs="" i racks=0
    shift
    if [ "${1:-}" = --racks ]; then
        racks=1
        shift
    fi
    local ports
    ports="$(python3 -c 'import socket
s = [socket.socket() for _ in range(3)]
for x in s: x.bind(("127.0.0.1", 0))
print(" ".join(str(x.getsockname()[1]) for x in s))')"
    i=1
    for p in $ports; do
        voters="${voters:+$voters,}$i@127.0.0.1:$p"
        i=$((i + 1))
    done
    for i in 1 2 3; do
        local rack=()
        [ "$racks" = 1 ] && rack=(--set broker.rack="RACK$i"
            --set replica.selector.class=org.apache.kafka.common.replica.RackAwareReplicaSelector)
        start_weir "$name-$i" --set node.id="$i" --set controller.quorum.voters="$voters" \
            --set security.inter.broker.protocol=PLAINTEXT \
            --set listeners.per.core=false "${rack[@]}" "$@"
        addrs="${addrs:+$addrs,}$(sed -n 's/^bootstrap.servers=//p' "$WORK/$name-$i.conf")"
    done
    for i in 1 2 3; do
        local seen=""
        for _ in $(seq 300); do
            seen="$({ grep -o 'RegisterBroker { id: [123],' "$LOGS/weir-$name-$i.log" || true; } \
                | sort -u | wc -l)"
            [ "$seen" = 3 ] && break
            sleep 0.1
        done
        [ "$seen" = 3 ] || { echo "broker $i of $name saw $seen of 3 brokers register" >&2; exit 1; }
    done
    printf 'bootstrap.servers=%s\nbroker.address.family=v4\n' "$addrs" >"$WORK/$name.conf"
}

# runner CONF LOG ARGS...: one test-runner process.
runner() {
    local conf="$1" log="$2"
    shift 2
    (cd "$SRC/tests" && LD_LIBRARY_PATH="../src:../src-cpp" RDKAFKA_TEST_CONF="$conf" \
        TEST_KAFKA_VERSION="$KAFKA_VERSION" timeout "${WEIR_LIBRDKAFKA_TIMEOUT_S:-1800}" \
        ./test-runner "$@" >"$log" 2>&1)
}

if [ "$ALL" = 0 ]; then
    start_weir default
    pass=0 fail=0
    for spec in "${SPECS[@]}"; do
        conf="$WORK/default.conf" plain="$spec" scenario=() protocol="${TEST_CONSUMER_GROUP_PROTOCOL:-}"
        case "$spec" in
            consumer/*)
                plain="${spec#consumer/}" protocol=consumer
                ;;
            sasl/*)
                plain="${spec#sasl/}" conf="$WORK/sasl.conf"
                [ -f "$conf" ] || start_weir_sasl sasl
                ;;
            cluster/*)
                plain="${spec#cluster/}" conf="$WORK/cluster.conf"
                [ -f "$conf" ] || start_weir_cluster cluster
                ;;
            cluster-noautocreate/*)
                plain="${spec#cluster-noautocreate/}" conf="$WORK/cluster-na.conf" scenario=(-s noautocreate)
                [ -f "$conf" ] || start_weir_cluster cluster-na --set auto.create.topics.enable=false
                ;;
            cluster-racks/*)
                plain="${spec#cluster-racks/}" conf="$WORK/cluster-racks.conf"
                [ -f "$conf" ] || start_weir_cluster cluster-racks --racks
                ;;
        esac
        t="${plain%%:*}" sub=""
        [ "$plain" != "$t" ] && sub="${plain#*:}"
        log="$LOGS/librdkafka-${spec//\//-}.log"
        log="${log//:/-}"
        # -D: delete the test topics after the test (one test at a time here).
        if SUBTESTS="$sub" TEST_CONSUMER_GROUP_PROTOCOL="$protocol" \
            runner "$conf" "$log" "${scenario[@]}" -D "$t"; then
            echo "PASS $spec"; pass=$((pass + 1))
        else
            echo "FAIL $spec (log: $log)"; grep -a -A2 "TEST FAILURE" "$log" | head -8 | sed 's/^/    /'
            fail=$((fail + 1))
        fi
    done
    echo "librdkafka suite: $pass passed, $fail failed"
    [ "$fail" -eq 0 ]
    exit
fi

# ---- --all ----
# The list against the test table (tests/test.c): every test named once, no stale names.
awk '/struct test tests\[\] = \{/,/^\};/' "$SRC/tests/test.c" | grep -o '_TEST([0-9A-Za-z_]*' \
    | sed 's/_TEST(//' | sort >"$WORK/table"
grep -v '^\s*\(#\|$\)' "$LIST" | awk '{print $1}' | sort >"$WORK/listed"
if ! diff -u "$WORK/table" "$WORK/listed" >"$WORK/diff"; then
    echo "tests/librdkafka-suite.txt does not match librdkafka's test table (- table, + list):" >&2
    grep '^[-+][0-9]' "$WORK/diff" >&2
    exit 1
fi

# One job per test number with an entry to run ("default") or, with --local, a local entry:
# test-runner selects tests by number, and -L/-l keep a number's broker and local variants
# apart; a number whose entries are all local runs unfiltered ("localall": 0139 and 0150 use
# only the mock cluster but are not flagged local). Jobs share the broker, so no -D
# (it deletes every test topic in the cluster, other jobs' too). 0113 (~15 min) starts first.
grep -v '^\s*\(#\|$\)' "$LIST" | awk -v local="$LOCAL" '
    { n = substr($1, 1, 4) }
    $2 == "run" { print "default", n }
    $2 ~ /^local/ { locals[n] = 1 }
    $2 !~ /^local/ { others[n] = 1 }
    END { if (local == 1) for (n in locals) print (n in others ? "local" : "localall"), n }' \
    | sort -u | awk '{ print ($2 == "0113" ? 0 : 1), $0 }' | sort -k1,1n -k3 | cut -d' ' -f2- >"$WORK/jobs"
start_weir default

job() {
    local kind="$1" num="$2" log="$LOGS/librdkafka-$2-$1.log" s=$SECONDS
    case "$kind" in
        default) runner "$WORK/default.conf" "$log" -L "$num" ;;
        local) runner "$WORK/default.conf" "$log" -l "$num" ;;
        localall) runner "$WORK/default.conf" "$LOGS/librdkafka-$2-local.log" "$num" ;;
    esac
    echo "  ran $num ($kind): rc=$? in $((SECONDS - s)) s"
}
rm -f "$LOGS"/librdkafka-*-{default,local}.log
export -f job runner
export WORK LOGS SRC KAFKA_VERSION
start=$SECONDS
echo "librdkafka $RDKAFKA_SYS suite: $(wc -l <"$WORK/jobs") test-runner jobs, $JOBS at a time"
xargs -P "$JOBS" -L 1 bash -c 'job "$0" "$1"' <"$WORK/jobs" || true

# Results: each test-runner's summary table ("| NAME | STATE | ..."); a test missing from it
# (the runner crashed or was killed) did not pass.
for f in "$LOGS"/librdkafka-*-{default,local}.log; do
    [ -f "$f" ] || continue
    kind="${f%.log}" && kind="${kind##*-}"
    sed 's/\x1b\[[0-9;]*m//g' "$f" | { grep -a '^| [0-9]' || true; } \
        | awk -F'|' -v s="$kind" '{ gsub(/ /, "", $2); gsub(/ /, "", $3); print $2, s, $3 }'
done >"$WORK/states"
pass=0 fail=0 na=0 kfail=0 loc=0 locpass=0 locfail=0
while read -r name verdict rest; do
    case "$verdict" in
        run)
            state="$(awk -v n="$name" '$1 == n && $2 == "default" { print $3 }' "$WORK/states")"
            if [ "$state" = PASSED ]; then
                pass=$((pass + 1))
            else
                fail=$((fail + 1))
                echo "FAIL $name: ${state:-no result (crashed or timed out)}; log: $LOGS/librdkafka-${name:0:4}-default.log"
                grep -a -A2 "TEST FAILURE" "$LOGS/librdkafka-${name:0:4}-default.log" 2>/dev/null \
                    | sed 's/\x1b\[[0-9;]*m//g' | head -6 | sed 's/^/    /'
            fi
            ;;
        na:*) na=$((na + 1)) ;;
        known-fail:*)
            kfail=$((kfail + 1))
            if awk -v n="$name" '$1 == n && $3 == "PASSED" { f = 1 } END { exit !f }' "$WORK/states"; then
                echo "note: known-fail $name passed: update the list?"
            fi
            ;;
        local*)
            loc=$((loc + 1))
            if [ "$LOCAL" = 1 ]; then
                state="$(awk -v n="$name" '$1 == n && $2 == "local" { print $3 }' "$WORK/states")"
                case "$state" in
                    PASSED) locpass=$((locpass + 1)) ;;
                    SKIPPED) ;;
                    *) locfail=$((locfail + 1)); echo "FAIL (local) $name: ${state:-no result}" ;;
                esac
            fi
            ;;
        *) echo "bad verdict for $name: $verdict" >&2; exit 2 ;;
    esac
done < <(grep -v '^\s*\(#\|$\)' "$LIST")
locrun="" && [ "$LOCAL" = 1 ] && locrun=" ($locpass passed, $locfail failed)"
echo "librdkafka suite against weir: $pass passed, $fail failed (of $((pass + fail)) run);" \
    "$kfail known-fail, $na not applicable, $loc local$locrun; $((SECONDS - start)) s"
[ "$fail" -eq 0 ] && [ "$locfail" -eq 0 ]
