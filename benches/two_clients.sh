#!/usr/bin/env bash
# Every scenario of docs/bench.md's "Both clients" table, through weir's native client and
# through librdkafka, back to back, each with its own same-run raw-device and loopback
# yardsticks. About 6 minutes on the 2-core VM. Needs a release build with librdkafka (cargo build --release --features rdkafka).
# Output: target/bench/two-clients/<name>.{txt,json,svg} and a summary on stdout.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
W=${WEIR_BIN:-target/release/weir}
OUT=target/bench/two-clients
mkdir -p "$OUT"
RD64=(--rd-set fetch.max.bytes=67108864 --rd-set max.partition.fetch.bytes=67108864
      --rd-set receive.message.max.bytes=200000000)
run() {
    local name=$1; shift
    echo "=== $name: weir bench $*"
    "$W" bench "$@" --json "$OUT/$name.json" --svg "$OUT/$name.svg" >"$OUT/$name.txt" 2>"$OUT/$name.err"
    grep -E "raw disk (read|write)|loopback|catch-up read |weir produce |latency.*(p50|p99 |p999)|goal" "$OUT/$name.txt" || true
}
run consume-disk-native  consume-disk --dataset 4GiB --producers 2 --fetch long-poll --raw-secs 1
run consume-disk-rd      consume-disk --client rdkafka --dataset 4GiB --producers 2 --raw-secs 1
run consume-disk-rd64    consume-disk --client rdkafka --dataset 4GiB --producers 2 --raw-secs 1 "${RD64[@]}"
run consume-disk-rd64q   consume-disk --client rdkafka --dataset 4GiB --producers 2 --raw-secs 1 "${RD64[@]}" \
                         --rd-set queued.max.messages.kbytes=1048576
run produce-native       produce --producers 2 --duration 8 --acks -1 --raw-secs 1
run produce-rd           produce --producers 2 --duration 8 --acks -1 --raw-secs 1 --client rdkafka
run tail-2k-native       consume-tail --rate 2000 --duration 8 --fetch long-poll --raw-secs 1
run tail-2k-rd           consume-tail --client rdkafka --rate 2000 --duration 8 --raw-secs 1
run tail-half-native     consume-tail --duration 8 --fetch long-poll --raw-secs 1
run tail-half-rd         consume-tail --client rdkafka --duration 8 --raw-secs 1
