#!/usr/bin/env bash
# Configures and builds rayd into ./build (or $RAYD_BUILD_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${RAYD_BUILD_DIR:-build}"
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE="${RAYD_BUILD_TYPE:-RelWithDebInfo}" "$@"
cmake --build "$build_dir" -j "$(nproc)"
