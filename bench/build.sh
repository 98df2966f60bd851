#!/usr/bin/env bash
# Builds the benchmark binaries a bench/ script is about to run, in $RAYD_BUILD_DIR (default
# build/), if they are missing or stale: the test command's build (scripts/build.sh --tests)
# leaves bench/ out, since no test runs it. Quiet when there is nothing to do; on a failure,
# prints the end of the build's output and exits 1.
#
#   bench/build.sh TARGET...        e.g. bench/build.sh search_bench search_replay_bench
set -euo pipefail
build="${RAYD_BUILD_DIR:-build}"
[ -f "$build/CMakeCache.txt" ] || { echo "bench/build.sh: no build in $build (scripts/build.sh)" >&2; exit 1; }
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
if ! cmake --build "$build" --target "$@" > "$log" 2>&1; then
  tail -n 30 "$log" >&2
  echo "bench/build.sh: building $* in $build failed" >&2
  exit 1
fi
