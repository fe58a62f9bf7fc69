#!/usr/bin/env bash
# The broker's CPU per GB produced, for one or more broker binaries, in alternating rounds on
# the same machine (the regression benchmark of the produce path's copies, issue 14).
#
#   benches/produce_cpu.sh [--rounds N] [--duration S] BINARY [BINARY ...]
#
# Each round starts every binary in turn (`weir serve --cores 2`, a fresh data dir, a fixed
# port) and runs `weir bench produce --bootstrap ... --broker-pid ...` against it twice: through
# librdkafka (2 producers, acks=1) and through weir's native client (2 producers, acks=1). The
# bench client is always the first binary, so only the broker differs. Prints one line per
# run: binary, client, MB/s, broker CPU s/GB, the broker's peak RSS (MiB); then the medians.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

ROUNDS=3
DURATION=8
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) ROUNDS=$2; shift 2 ;;
        --duration) DURATION=$2; shift 2 ;;
        *) break ;;
    esac
done
[ $# -ge 1 ] || { echo "usage: $0 [--rounds N] [--duration S] BINARY [BINARY ...]" >&2; exit 2; }
BENCH=$(realpath "$1")
WORK=$(mktemp -d "${TMPDIR:-/tmp}/weir-produce-cpu.XXXXXX")
PORT=${WEIR_BENCH_PORT:-19092}
RESULTS="$WORK/results.txt"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT

run_one() { # binary client
    local bin=$1 client=$2 data="$WORK/data" pid json
    rm -rf "$data"
    "$bin" serve --data-dir "$data" --listen "127.0.0.1:$PORT" --cores 2 >"$WORK/broker.log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break
        sleep 0.1
    done
    json="$WORK/out.json"
    "$BENCH" bench produce --client "$client" --producers 2 --duration "$DURATION" --acks 1 \
        --raw-secs 1 --bootstrap "127.0.0.1:$PORT" --broker-pid "$pid" \
        --work-dir "$WORK/bench" --json "$json" >"$WORK/bench.log" 2>&1 \
        || { cat "$WORK/bench.log" >&2; exit 1; }
    hwm=$(awk '/VmHWM/ {print int($2 / 1024)}' "/proc/$pid/status")
    kill "$pid"; wait "$pid" 2>/dev/null || true
    python3 - "$json" "$bin" "$client" "$hwm" >>"$RESULTS" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
f = {x["name"] + " " + x["unit"]: x["value"] for x in d["figures"]}
print(sys.argv[2], sys.argv[3], round(f["weir produce MB/s"], 1),
      round(f["broker CPU per GB produced s/GB"], 3), sys.argv[4])
EOF
    tail -n 1 "$RESULTS"
}

for round in $(seq "$ROUNDS"); do
    for bin in "$@"; do
        for client in rdkafka native; do
            run_one "$(realpath "$bin")" "$client"
        done
    done
done
echo "== medians (binary, client, MB/s, broker CPU s/GB, peak RSS MiB) =="
python3 - "$RESULTS" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    b, c, mbs, cpu, hwm = line.split()
    rows.setdefault((b, c), []).append((float(mbs), float(cpu), int(hwm)))
for (b, c), v in rows.items():
    med = lambda i: statistics.median(r[i] for r in v)
    print(b, c, round(med(0), 1), round(med(1), 3), med(2), f"({len(v)} runs)")
EOF
