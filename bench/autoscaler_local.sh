#!/usr/bin/env bash
# The autoscaler on this machine with the local provider (real `rayd start` nodes):
#   1. demand to a trial running on a new node: a 1-trial sweep (2 workers) on a head with no
#      CPUs, from `rayd tune` to the trial's first result, against the same sweep on a cluster
#      whose node is already there (the peer: the same head, a node started by hand);
#   2. nodes launched against the minimum needed: an 8-trial ASHA sweep of 2-worker trials on
#      2-CPU nodes, at most MAX_NODES: the launches, the peak, and min(MAX_NODES, 8) needed.
# REPEATS runs of (1) each way. BURNERS=2 runs it beside two CPU burners. Prints figures only.
#
#   RAYD_BUILD_DIR=build [BURNERS=2] bench/autoscaler_local.sh [REPEATS] [MAX_NODES]
set -euo pipefail
cd "$(dirname "$0")/.."
rayd="$PWD/${RAYD_BUILD_DIR:-build}/cli/rayd"
repeats="${1:-3}"
max_nodes="${2:-4}"
source bench/data/common.sh
bench_work rayd-bench-autoscaler
export RAYD_TEMP_DIR="$work/tmp"
stop_all() { "$rayd" stop --force >/dev/null 2>&1 || true; }
trap 'stop_all; bench_cleanup' EXIT

cat >"$work/autoscaler.yaml" <<YAML
provider: {type: local}
max_nodes: $max_nodes
idle_timeout_s: 5
update_interval_s: 1
node_types:
  cpu2: {resources: {CPU: 2}, max_nodes: $max_nodes}
YAML
sweep() {  # sweep NAME SAMPLES ITERATIONS
  cat >"$work/$1.yaml" <<YAML
name: $1
trainable: toy_objective
param_space: {x: {uniform: [0.0, 4.0]}, iterations: $3, work_ms: 200}
scaling: {num_workers: 2}
tune:
  metric: loss
  mode: min
  num_samples: $2
  seed: 5
  scheduler: {type: asha, max_t: $3, grace_period: 1, reduction_factor: 2}
run: {storage_path: $work/results}
YAML
  echo "$work/$1.yaml"
}
now() { date +%s.%N; }
# Seconds from `rayd tune` to the first result line of the sweep NAME.
first_result() {  # first_result NAME ADDRESS
  local file t0 t1
  file=$(sweep "$1" 1 3)
  t0=$(now)
  "$rayd" tune "$file" --address "$2" >"$work/$1.log" 2>&1 &
  local pid=$!
  until compgen -G "$work/results/$1/*/result.json" >/dev/null &&
    [ -s "$(compgen -G "$work/results/$1/*/result.json" | head -1)" ]; do
    kill -0 "$pid" 2>/dev/null || { tail -5 "$work/$1.log" >&2; return 1; }
    sleep 0.05
  done
  t1=$(now)
  wait "$pid"
  python3 -c "print(f'{$t1 - $t0:.2f}')"
}
address() { grep -o 'Cluster address: \S*' "$1" | cut -d' ' -f3; }
status_json() { "$rayd" status --format json; }

start_burners
echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg); burners: ${BURNERS:-0}"
new_node=() existing_node=()
for i in $(seq 1 "$repeats"); do
  # Autoscaled: nothing to run on until the autoscaler launches a node.
  "$rayd" start --head --port 0 --num-cpus 0 --include-dashboard false \
    --autoscaler "$work/autoscaler.yaml" >"$work/head.out"
  new_node+=("$(first_result "auto$i" "$(address "$work/head.out")")")
  stop_all
  # The peer: the node is already there.
  "$rayd" start --head --port 0 --num-cpus 0 --include-dashboard false >"$work/head.out"
  addr=$(address "$work/head.out")
  "$rayd" start --address "$addr" --num-cpus 2 >/dev/null
  existing_node+=("$(first_result "fixed$i" "$addr")")
  stop_all
done
echo "demand to a trial's first result (s), 1 trial of 2 workers, $repeats runs:"
echo "  on a node the autoscaler launches: ${new_node[*]}"
echo "  on a node already there (peer):    ${existing_node[*]}"

"$rayd" start --head --port 0 --num-cpus 0 --include-dashboard false \
  --autoscaler "$work/autoscaler.yaml" >"$work/head.out"
file=$(sweep many 8 4)
peak=0
"$rayd" tune "$file" --address "$(address "$work/head.out")" >"$work/many.log" 2>&1 &
pid=$!
while kill -0 "$pid" 2>/dev/null; do
  n=$(status_json | python3 -c 'import json,sys; print(sum(1 for n in json.load(sys.stdin)["nodes"] if n["state"]=="ALIVE" and "rayd.io/autoscaler-instance" in n["labels"]))')
  [ "$n" -gt "$peak" ] && peak=$n
  sleep 0.5
done
wait "$pid" || { tail -5 "$work/many.log" >&2; exit 1; }
launched=$(status_json | python3 -c 'import json,sys; print(json.load(sys.stdin)["autoscaler"]["counters"]["launched"])')
needed=$(( max_nodes < 8 ? max_nodes : 8 ))
echo "8 ASHA trials of 2 workers on 2-CPU nodes, at most $max_nodes: launched $launched, peak $peak, needed $needed"
