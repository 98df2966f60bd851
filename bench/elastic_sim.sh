#!/usr/bin/env bash
# Elastic trials against fixed-size ones in `rayd tune --simulate` (no cluster): ASHA over the
# recorded MLP grid (bench/search/data/mlp_curves.csv: 108 configs, 15 epochs, recorded on one
# worker each) on a simulated cluster of WORKERS workers, three ways:
#   fixed 1     every trial 1 worker, WORKERS trials at once
#   fixed 4     every trial 4 workers, WORKERS / 4 trials at once
#   elastic     every trial [1, 4] workers, CONCURRENT trials at once; the Tuner gives free
#               workers to the trials ASHA ranks best (resize_interval_s RESIZE, RESTART s each)
# An iteration on w workers takes its recorded time x 1 / speedup(w), speedup = SPEEDUP (by
# default 1, 1.9, 2.7, 3.4: a data-parallel MLP's, not linear). Prints each one's simulated
# wall clock, worker utilization and the time its best loss was first reported. Prints figures
# only; asserts nothing.
#
#   RAYD_BUILD_DIR=build bench/elastic_sim.sh [WORKERS] [CONCURRENT] [RESIZE] [RESTART]
#   default 16 8 0.1 0.5
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
rayd="$root/${RAYD_BUILD_DIR:-build}/cli/rayd"
workers="${1:-16}"
concurrent="${2:-8}"
resize="${3:-0.1}"
restart="${4:-0.5}"
speedup="${SPEEDUP:-1, 1.9, 2.7, 3.4}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

run() {  # run NAME NUM_WORKERS MAX_CONCURRENT
  cat >"$work/$1.yaml" <<YAML
name: $1
trainable: mlp_classifier
scaling: {num_workers: $2, resize_interval_s: $resize}
param_space:
  lr: {grid_search: [0.001, 0.003, 0.01, 0.03, 0.1, 0.3]}
  hidden: {grid_search: [32, 128, 512]}
  batch_size: {grid_search: [16, 64, 256]}
  momentum: {grid_search: [0.0, 0.9]}
  epochs: 15
tune:
  metric: loss
  mode: min
  seed: 1
  max_concurrent_trials: $3
  scheduler: {type: asha, max_t: 15, grace_period: 1, reduction_factor: 3}
  simulate: {workers: $workers, speedup: [$speedup], restart_s: $restart, recorded_workers: 1}
run: {storage_path: $work/results}
YAML
  "$rayd" tune "$work/$1.yaml" --simulate "$root/bench/search/data/mlp_curves.csv" \
    >"$work/$1.log" 2>&1 || { tail -5 "$work/$1.log" >&2; return 1; }
  local clock utilization best value
  clock=$(grep -o 'simulated clock [0-9.]*' "$work/$1.log" | grep -o '[0-9.]*$')
  utilization=$(grep -o 'utilization [0-9.]*[0-9]' "$work/$1.log" | grep -o '[0-9.]*$')
  best=$(grep -o 'first reported at [0-9.]*' "$work/$1.log" | grep -o '[0-9.]*$')
  value=$(grep -o 'Best trial .*' "$work/$1.log" | grep -o ' loss=[0-9.]*' | cut -d= -f2)
  printf '%-22s %10s %12s %14s %10s\n' "$4" "$clock" "$utilization" "$best" "$value"
}
printf 'ASHA over 108 recorded MLP configs, %s simulated workers, speedup [%s], restart %s s\n' \
  "$workers" "$speedup" "$restart"
printf '%-22s %10s %12s %14s %10s\n' trials "wall (s)" utilization "best at (s)" "best loss"
run fixed1 1 "$workers" "fixed 1 worker"
run fixed4 4 $((workers / 4)) "fixed 4 workers"
run elastic "[1, 4]" "$concurrent" "elastic [1, 4], $concurrent"
# The three sweeps need not end on the same best value: when did each first report a loss
# within TOLERANCE (default 0.5%) of the best any of them found?
python3 - "$work/results" "${TOLERANCE:-0.005}" <<'PY'
import csv, sys
root, tolerance = sys.argv[1], float(sys.argv[2])
traces = {}
for name in ("fixed1", "fixed4", "elastic"):
    with open(f"{root}/{name}/simulation_trace.csv") as f:
        traces[name] = [(float(r["time_s"]), float(r["loss"])) for r in csv.DictReader(f)
                        if r["loss"] not in ("", "nan")]
best = min(v for rows in traces.values() for _, v in rows)
target = best * (1 + tolerance)
print(f"loss <= {target:.5f} (within {tolerance:.1%} of the best, {best:.5f}) first reported at:")
at = {n: min((t for t, v in rows if v <= target), default=float("inf")) for n, rows in traces.items()}
for name, t in at.items():
    print(f"  {name:8s} {t:6.1f} s")
fixed = min(at["fixed1"], at["fixed4"])
print(f"  elastic vs the better fixed: {fixed / at['elastic']:.2f}x faster")
PY
