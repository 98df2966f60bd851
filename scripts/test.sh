#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, and runs every test
# (labels: unit, integration, e2e, fault, deploy), then the fuzz targets side by side for
# $RAYD_FUZZ_SECONDS (default 10; scripts/fuzz.sh; 0 skips them). Extra arguments go to ctest
# (e.g. -L unit). Each phase's time is printed, and all of them again as the last line.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
phases=""
phase() {
  echo "test.sh: $1 took $((SECONDS - start)) s"
  phases+="${phases:+, }$1 $((SECONDS - start)) s"
  start=$SECONDS
}
# Every phase's time again as the last line, however the command ends: CI keeps only the end
# of the output, where the first phases' own lines are long gone.
summary() {
  local rc=$?
  local tail=""
  [ "$rc" -eq 0 ] || tail="; then $((SECONDS - start)) s in the phase that failed (exit $rc)"
  echo "test.sh: ${phases:-no phase finished}${tail}; ${SECONDS} s in all"
}
trap summary EXIT
./scripts/install-deps.sh
phase "install-deps"
./scripts/check-layers.sh  # the include rules of ARCHITECTURE.md §2, before spending a build
./scripts/build.sh --tests
# The dashboard's browser test drives Chromium with playwright-core (pinned in package-lock.json).
(cd tests/e2e/dashboard && npm ci --no-audit --no-fund --loglevel=error)
# The Parquet tests' fixtures come from a JavaScript writer (hyparquet-writer, pinned likewise).
(cd tests/unit/data/parquet_js && npm ci --no-audit --no-fund --loglevel=error)
phase "build"
build_dir="${RAYD_BUILD_DIR:-build}"
# Two tests per core: most tests spend much of their time waiting on their own daemons,
# heartbeats and rendezvous (ctest -j2 kept 2 cores ~55% busy); the fault and load tests still
# run alone (RUN_SERIAL). On this 2-core machine the rest took 539 s at -j4, against ~655 s at -j2.
(cd "$build_dir" && ctest --output-on-failure --timeout 600 -j "$(($(nproc) * 2))" "$@")
phase "ctest"
fuzz_seconds="${RAYD_FUZZ_SECONDS:-10}"
[ "$fuzz_seconds" -eq 0 ] || ./scripts/fuzz.sh "$fuzz_seconds"
phase "fuzz"
