#!/usr/bin/env bash
# Configures and builds rayd into ./build (or $RAYD_BUILD_DIR).
#
#   scripts/build.sh [CMAKE_ARGS...]          everything: libraries, binaries, tests, benchmarks
#   scripts/build.sh --tests [CMAKE_ARGS...]  what the test command runs: everything but the
#                                             benchmarks (the bench/ scripts build theirs)
#   scripts/build.sh --main [CMAKE_ARGS...]   only what the main job and the package need: the
#                                             `rayd` binary, its tune plugin, the example
#                                             trainables and the quickstart example; no tests
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${RAYD_BUILD_DIR:-build}"
build_type="${RAYD_BUILD_TYPE:-RelWithDebInfo}"
targets=()
tests=ON
benchmarks=ON
if [ "${1:-}" = "--tests" ]; then
  shift
  benchmarks=OFF
elif [ "${1:-}" = "--main" ]; then
  shift
  tests=OFF
  targets=(rayd rayd_cli_tune example_loops example_trainables quickstart)
  # No debug info: it is a third of the compile time, and the main job needs none.
  build_type="${RAYD_BUILD_TYPE:-Release}"
fi
# Sources compiled in batches (CMakeLists.txt's RAYD_UNITY_BUILD): ~2.5x faster from scratch.
# RAYD_UNITY_BUILD=OFF for a tree you edit and rebuild file by file. Release is -O2 (-O3
# compiles ~15% slower); RelWithDebInfo keeps line tables only (-g1: file:line in backtraces,
# for a fifth of full debug info's compile time; pass
# -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g -DNDEBUG" for gdb). Later arguments win: a caller
# may pass -DRAYD_BUILD_TESTS=OFF.
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE="$build_type" \
  -DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
  -DRAYD_UNITY_BUILD="${RAYD_UNITY_BUILD:-ON}" -DRAYD_BUILD_TESTS="$tests" -DRAYD_BUILD_BENCHMARKS="$benchmarks" "$@"
cmake --build "$build_dir" -j "$(nproc)" ${targets[@]:+--target "${targets[@]}"}
