#!/usr/bin/env bash
# Builds rayd's libFuzzer targets (fuzz/, clang + ASan/UBSan) into ./build-fuzz (or
# $RAYD_FUZZ_BUILD_DIR) and runs each one: first once over its regression inputs
# (fuzz/regressions/TARGET/), then for a bounded time from a copy of its seed corpus
# (fuzz/corpus/TARGET/; the repository is not modified), all targets at once. Exits non-zero
# on any crash, leak, sanitizer report or unexpected exception; the input that did it is kept
# under BUILD_DIR/artifacts/ (add it to fuzz/regressions/TARGET/ once fixed).
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET]     default 30
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-30}"
build_dir="${RAYD_FUZZ_BUILD_DIR:-build-fuzz}"
targets=(frame tune_yaml http)

# Installs nothing: scripts/install-deps.sh lists these.
for p in clang libclang-rt-14-dev; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    echo "fuzz: $p is not installed (scripts/install-deps.sh installs it)" >&2
    exit 1
  fi
done

start=$(date +%s)
CC=clang CXX=clang++ cmake -S fuzz -B "$build_dir" -G Ninja >/dev/null
cmake --build "$build_dir" -j "$(nproc)" --target "${targets[@]/%/_fuzzer}"
echo "fuzz: built in $(($(date +%s) - start)) s"

work="$(mktemp -d)"
pids=()
# A bare `kill` (no pids left) is a usage error, exit 2, and under set -e that would be the
# script's status even after every target passed.
trap 'if [ ${#pids[@]} -gt 0 ]; then kill "${pids[@]}" 2>/dev/null || true; fi; rm -rf "$work"' EXIT
mkdir -p "$build_dir/artifacts"
failed=()
timed=()
for target in "${targets[@]}"; do
  bin="$build_dir/${target}_fuzzer"
  log="$work/$target.log"
  opts=(-rss_limit_mb=2048 -artifact_prefix="$build_dir/artifacts/$target-")
  # Files given as arguments run once each: every crash found so far, kept fixed.
  shopt -s nullglob
  regressions=(fuzz/regressions/"$target"/*)
  shopt -u nullglob
  if [ ${#regressions[@]} -gt 0 ]; then
    if ! "$bin" "${opts[@]}" "${regressions[@]}" >"$log" 2>&1; then
      tail -n 40 "$log"
      echo "fuzz: $target: a regression input fails again" >&2
      failed+=("$target")
      continue
    fi
    echo "fuzz: $target: ${#regressions[@]} regression inputs pass"
  fi
  # The timed runs go side by side, one process each (the targets share nothing): the phase
  # takes SECONDS, not SECONDS per target.
  cp -r "fuzz/corpus/$target" "$work/corpus-$target"
  "$bin" "${opts[@]}" -max_total_time="$seconds" -print_final_stats=1 \
    "$work/corpus-$target" >"$log" 2>&1 &
  pids+=($!)
  timed+=("$target")
done
for i in "${!timed[@]}"; do
  target="${timed[$i]}"
  log="$work/$target.log"
  if ! wait "${pids[$i]}"; then
    tail -n 60 "$log"
    echo "fuzz: $target: FAILED; the input is under $build_dir/artifacts/" >&2
    failed+=("$target")
    continue
  fi
  runs="$(grep -o 'Done [0-9]* runs in [0-9]* second(s)' "$log" | tail -n 1)"
  echo "fuzz: $target: ${runs:-no summary}, no crash"
done
pids=()

if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: failed: ${failed[*]}" >&2
  exit 1
fi
