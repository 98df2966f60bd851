#!/usr/bin/env bash
# The driver's instructions per synchronous task and per synchronous actor call, counted by
# callgrind: starts a head of its own (temp session root, free port, no dashboard), runs
# bench/sync_call_cost once natively (wall-clock figures) and then under
# `valgrind --tool=callgrind` (the driver only: its workers are separate processes, started
# natively), sums each phase's dump over all the driver's threads, leaves out busy-waiting
# (bench/callgrind_totals.py says why), divides by the calls, and stops the head.
#
#   bench/callgrind_sync.sh [BUILD_DIR] [--calls N] [--warmup W] [--runs R]
#                           [--native-calls N] [--keep DIR]
#
# BUILD_DIR: default build/ (its cli/rayd and bench/sync_call_cost are built if missing). --calls: measured calls per phase under callgrind (default 500; the counts
# are per call, and callgrind runs ~50x slower). --runs: callgrind runs, each printed, then
# their median (default 1). --native-calls: calls per phase of the wall-clock run (default
# 2000). --keep DIR: keep the callgrind.out.* files there (callgrind_annotate reads them).
# VALGRIND_ARGS: more valgrind options (not --separate-threads=yes: a dump then holds only the
# thread that asked for it). Needs valgrind, python3 and objdump.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
build="$repo/build"
calls=500
warmup=200
runs=1
native_calls=2000
keep=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --calls) calls="$2"; shift 2 ;;
    --warmup) warmup="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --native-calls) native_calls="$2"; shift 2 ;;
    --keep) keep="$2"; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    -*) echo "callgrind_sync.sh: unknown flag $1" >&2; exit 2 ;;
    *) build="$(cd "$1" && pwd)"; shift ;;
  esac
done
rayd_bin="$build/cli/rayd"
bench_bin="$build/bench/sync_call_cost"
RAYD_BUILD_DIR="$build" "$repo/bench/build.sh" rayd sync_call_cost
for b in "$rayd_bin" "$bench_bin"; do
  [[ -x "$b" ]] || { echo "callgrind_sync.sh: $b is missing (ninja -C $build rayd sync_call_cost)" >&2; exit 2; }
done
command -v valgrind >/dev/null || { echo "callgrind_sync.sh: valgrind is not installed" >&2; exit 2; }

root="$(mktemp -d /tmp/rayd-callgrind-XXXXXX)"
cleanup() {
  "$rayd_bin" stop --temp-dir "$root" >/dev/null 2>&1 ||
    "$rayd_bin" stop --force --temp-dir "$root" >/dev/null 2>&1 || true
  rm -rf "$root"
}
trap cleanup EXIT

# --port 0: the head takes a free port and prints it ("Cluster address: HOST:PORT").
"$rayd_bin" start --head --port 0 --num-cpus 2 --include-dashboard false --temp-dir "$root" \
  >"$root/start.log" 2>&1 || { cat "$root/start.log" >&2; exit 1; }
address="$(sed -n 's/^ *Cluster address: *//p' "$root/start.log")"
[[ -n "$address" ]] || { cat "$root/start.log" >&2; exit 1; }
echo "head at $address (session root $root)"

# Native: wall-clock microseconds per call.
"$bench_bin" --address "$address" --temp-dir "$root" --calls "$native_calls" --warmup "$warmup" \
  >"$root/native.log" 2>&1 || { cat "$root/native.log" >&2; exit 1; }
sed -n 's/^wall us per/native wall us per/p' "$root/native.log"

per_task=()
per_actor=()
for ((run = 1; run <= runs; ++run)); do
  out="$root/callgrind.$run"
  mkdir -p "$out"
  # Collection stays on (--collect-atstart=yes): sync_call_cost zeroes every thread's counts
  # when a phase starts and dumps them when it ends (see there why not TOGGLE_COLLECT).
  # --dump-instr=yes: callgrind_totals.py finds busy-wait loops by their instructions.
  # shellcheck disable=SC2086
  if ! timeout 3600 valgrind --tool=callgrind --collect-atstart=yes --dump-instr=yes \
      --callgrind-out-file="$out/callgrind.out.%p" ${VALGRIND_ARGS:-} \
      "$bench_bin" --address "$address" --temp-dir "$root" --calls "$calls" \
      --warmup "$warmup" >"$out/bench.log" 2>&1; then
    tail -n 30 "$out/bench.log" >&2
    exit 1
  fi
  # Lines "PHASE TOTAL SPIN"; the figure is (TOTAL - SPIN) / calls.
  totals="$(python3 "$repo/bench/callgrind_totals.py" "$out" tasks actor_calls)"
  read -r _ task_total task_spin < <(grep '^tasks ' <<<"$totals")
  read -r _ actor_total actor_spin < <(grep '^actor_calls ' <<<"$totals")
  per_task+=($(((task_total - task_spin) / calls)))
  per_actor+=($(((actor_total - actor_spin) / calls)))
  prefix=""
  [[ "$runs" -gt 1 ]] && prefix="run $run: "
  echo "${prefix}instructions per sync task: ${per_task[-1]}"
  echo "${prefix}instructions per sync actor call: ${per_actor[-1]}"
  echo "${prefix}  (with busy-waiting: $((task_total / calls)) and $((actor_total / calls));" \
    "$calls calls per phase)"
  if [[ -n "$keep" ]]; then
    mkdir -p "$keep/run$run"
    cp "$out"/callgrind.out.* "$out/bench.log" "$keep/run$run/"
  fi
done
if [[ "$runs" -gt 1 ]]; then
  median() { printf '%s\n' "$@" | sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
  echo "median of $runs runs:"
  echo "instructions per sync task: $(median "${per_task[@]}")"
  echo "instructions per sync actor call: $(median "${per_actor[@]}")"
fi
