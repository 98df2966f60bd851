#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, and runs every test
# (labels: unit, integration, e2e, fault, deploy), then the fuzz targets for $RAYD_FUZZ_SECONDS (default
# 10) each (scripts/fuzz.sh; 0 skips them). Extra arguments go to ctest (e.g. -L unit).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
phase() { echo "test.sh: $1 took $((SECONDS - start)) s"; start=$SECONDS; }
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
(cd "$build_dir" && ctest --output-on-failure --timeout 600 -j "$(nproc)" "$@")
phase "ctest"
fuzz_seconds="${RAYD_FUZZ_SECONDS:-10}"
[ "$fuzz_seconds" -eq 0 ] || ./scripts/fuzz.sh "$fuzz_seconds"
phase "fuzz"
