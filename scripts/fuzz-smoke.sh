#!/usr/bin/env bash
# Fuzz smoke run: builds weir's cargo-fuzz targets (fuzz/) and runs each for a short time
# (FUZZ_SECONDS, default 20) from its committed seed corpus, then replays the inputs in
# fuzz/found/ (past findings, kept as regressions). Fails if any target crashes; the
# crashing input is left in fuzz/artifacts/<target>/.
#
# Needs cargo-fuzz (installed here if missing) and nightly compiler flags, which the stable
# toolchain accepts with RUSTC_BOOTSTRAP=1. New corpus entries go to a temporary directory,
# so the committed seeds are not touched.
#
# Environment:
#   FUZZ_SECONDS=20        time per target
#   FUZZ_TARGETS="a b"     only these targets (default: all of `cargo fuzz list`)
#   FUZZ_RELEASE=1         build the targets optimized (cargo-fuzz's default). Without it they
#                          are built with --dev: a cold build takes ~5 minutes instead of ~12 on
#                          2 cores (CI builds from nothing), at ~1/40 of the executions per
#                          second: this is a smoke run and a replay of past findings; a fuzzing
#                          campaign sets FUZZ_RELEASE=1 and long FUZZ_SECONDS.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../fuzz"
export RUSTC_BOOTSTRAP=1
SECONDS_PER_TARGET=${FUZZ_SECONDS:-20}

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "==> installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi

TARGETS=${FUZZ_TARGETS:-$(cargo fuzz list)}
PROFILE=(--dev)
[ "${FUZZ_RELEASE:-0}" = 1 ] && PROFILE=()
echo "==> cargo fuzz build ${PROFILE[*]} ($(echo $TARGETS | tr '\n' ' '))"
cargo fuzz build "${PROFILE[@]}"

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
failed=()
for t in $TARGETS; do
    echo "==> $t: ${SECONDS_PER_TARGET}s"
    mkdir -p "$WORK/$t"
    if ! cargo fuzz run "${PROFILE[@]}" "$t" "$WORK/$t" "corpus/$t" -- \
        -max_total_time="$SECONDS_PER_TARGET" -rss_limit_mb=2048 -max_len=65536 \
        -print_final_stats=1 >"$WORK/$t.log" 2>&1; then
        tail -n 60 "$WORK/$t.log"
        failed+=("$t")
        continue
    fi
    grep -E "^stat::number_of_executed_units|^Done" "$WORK/$t.log" || true
    found=(found/"$t"-*)
    if [ -e "${found[0]}" ]; then
        echo "==> $t: replaying ${#found[@]} past findings"
        if ! cargo fuzz run "${PROFILE[@]}" "$t" "${found[@]}" -- -runs=1 >"$WORK/$t.found.log" 2>&1; then
            tail -n 60 "$WORK/$t.found.log"
            failed+=("$t (fuzz/found)")
        fi
    fi
done

if [ ${#failed[@]} -gt 0 ]; then
    echo "FAILED: fuzz targets crashed: ${failed[*]} (inputs in fuzz/artifacts/)" >&2
    exit 1
fi
echo "fuzz smoke: all targets ran ${SECONDS_PER_TARGET}s without a crash"
