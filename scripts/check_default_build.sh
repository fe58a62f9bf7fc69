#!/usr/bin/env bash
# The README's first command (`cargo run --release -- serve`) must build on a machine with
# only Rust: no crate of the default feature set may be built with cmake (rdkafka-sys, behind
# the opt-in `rdkafka` feature, is; zstd-sys and lz4-sys compile their C with the `cc` crate,
# which needs only the C compiler rustup's toolchain already relies on). A static check of the
# dependency graph — a build would not notice, since CI's cache holds rdkafka-sys built for
# `--features rdkafka`. The same check with `--features rdkafka` must find cmake, or the check
# itself is broken.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

cmake_crates() {
    cargo tree -p weir "$@" -e normal,build --target all --prefix none --format '{p}' \
        | awk '$1 == "cmake" || $1 == "rdkafka-sys" || $1 == "cmake-build" { print $1 " " $2 }' \
        | sort -u
}

found=$(cmake_crates)
if [ -n "$found" ]; then
    echo "the default build pulls crates built with cmake:" >&2
    echo "$found" >&2
    echo "(cargo tree -p weir -e normal,build -i cmake shows why)" >&2
    exit 1
fi
if [ -z "$(cmake_crates --features rdkafka)" ]; then
    echo "check_default_build.sh is broken: --features rdkafka should pull cmake" >&2
    exit 1
fi
echo "default build: no cmake-built crate (rdkafka-sys only with --features rdkafka)"
