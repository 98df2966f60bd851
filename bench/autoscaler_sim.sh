#!/usr/bin/env bash
# The autoscaler on the simulator at scale (`rayd tune --simulate`, no cluster): ASHA over
# TRIALS trials drawn from the recorded MLP grid (bench/search/data/mlp_curves.csv, its epoch
# times scaled by SCALE so an epoch takes minutes, as a real model's would), each trial one
# worker, on
#   fixed       a cluster of MAX_NODES nodes of WORKERS_PER_NODE workers, there all along;
#   autoscaled  the same maximum, nodes launched when trials wait (ready LATENCY s later, paid
#               from the launch) and terminated after IDLE s idle.
# Prints each one's simulated wall time, node-hours (fixed: nodes x wall time) and best loss,
# and the ratios the issue sets (node-hours <= 0.6x within 1.15x the wall time). Prints figures
# only; asserts nothing.
#
#   RAYD_BUILD_DIR=build bench/autoscaler_sim.sh [TRIALS] [MAX_NODES] [LATENCY] [IDLE]
#   default 1000 64 60 60; WORKERS_PER_NODE (4), SCALE (300), CONCURRENT (MAX_NODES x 4) env
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
rayd="$root/${RAYD_BUILD_DIR:-build}/cli/rayd"
trials="${1:-1000}"
max_nodes="${2:-64}"
latency="${3:-60}"
idle="${4:-60}"
per_node="${WORKERS_PER_NODE:-4}"
scale="${SCALE:-300}"
concurrent="${CONCURRENT:-$((max_nodes * per_node))}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The recorded curves with every time column scaled.
python3 - "$root/bench/search/data/mlp_curves.csv" "$work/curves.csv" "$scale" <<'PY'
import csv, sys
src, dst, scale = sys.argv[1], sys.argv[2], float(sys.argv[3])
with open(src) as f, open(dst, "w", newline="") as g:
    rows = csv.DictReader(f)
    out = csv.DictWriter(g, fieldnames=rows.fieldnames)
    out.writeheader()
    for row in rows:
        for key in ("time_this_iter_s", "time_total_s"):
            row[key] = repr(float(row[key]) * scale)
        out.writerow(row)
PY

run() {  # run NAME SIMULATE_MAP
  cat >"$work/$1.yaml" <<YAML
name: $1
trainable: mlp_classifier
scaling: {num_workers: 1}
param_space:
  lr: {choice: [0.001, 0.003, 0.01, 0.03, 0.1, 0.3]}
  hidden: {choice: [32, 128, 512]}
  batch_size: {choice: [16, 64, 256]}
  momentum: {choice: [0.0, 0.9]}
  epochs: 15
tune:
  metric: loss
  mode: min
  seed: 1
  num_samples: $trials
  max_concurrent_trials: $concurrent
  scheduler: {type: asha, max_t: 15, grace_period: 1, reduction_factor: 3}
  simulate: $2
run: {storage_path: $work/results}
YAML
  "$rayd" tune "$work/$1.yaml" --simulate "$work/curves.csv" >"$work/$1.log" 2>&1 ||
    { tail -5 "$work/$1.log" >&2; return 1; }
}
run fixed "{workers: $((max_nodes * per_node))}"
run autoscaled "{autoscaler: {max_nodes: $max_nodes, workers_per_node: $per_node, launch_latency_s: $latency, idle_timeout_s: $idle}}"

clock() { grep -o 'simulated clock [0-9.]*' "$work/$1.log" | grep -o '[0-9.]*$'; }
best() { grep -o 'Best trial .*' "$work/$1.log" | grep -o ' loss=[0-9.]*' | cut -d= -f2; }
fixed_s=$(clock fixed)
auto_s=$(clock autoscaled)
fixed_nh=$(python3 -c "print(f'{$max_nodes * $fixed_s / 3600:.2f}')")
auto_nh=$(grep -o 'Autoscaled: [0-9.]*' "$work/autoscaled.log" | grep -o '[0-9.]*$')
echo "ASHA over $trials trials (1 worker each, at most $concurrent at once) of the recorded MLP grid,"
echo "epochs x$scale; at most $max_nodes nodes of $per_node workers; launch latency $latency s, idle timeout $idle s"
printf '%-12s %12s %12s %10s\n' cluster "wall (s)" node-hours "best loss"
printf '%-12s %12s %12s %10s\n' fixed "$fixed_s" "$fixed_nh" "$(best fixed)"
printf '%-12s %12s %12s %10s\n' autoscaled "$auto_s" "$auto_nh" "$(best autoscaled)"
grep -o 'Autoscaled: .*' "$work/autoscaled.log"
python3 -c "print(f'autoscaled / fixed: node-hours {$auto_nh / $fixed_nh:.2f}x (target <= 0.6x), wall time {$auto_s / $fixed_s:.2f}x (target <= 1.15x)')"
