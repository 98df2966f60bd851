#!/usr/bin/env bash
# Command trainables against their peers, in one run (docs/command-trainables.md):
#   overhead    a sweep of N one-report trials: a trivial Python command (interpreter start,
#               `import rayd.train`, one report) next to the C++ toy_objective (one iteration),
#               both on an embedded cluster, 2 at once: seconds per trial
#   throughput  samples/s of examples/python/mlp_ddp.py on 2 ranks under `rayd train` next to
#               the same script on 2 processes started by hand with torchrun's environment
#               (MASTER_ADDR/PORT, RANK, WORLD_SIZE, ...): the ratio (target >= 0.98)
# Needs Debian's python3-torch. Prints figures only; asserts nothing.
#
#   RAYD_BUILD_DIR=build bench/command_bench.sh [TRIALS] [EPOCHS]      default 20, 8
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build="${RAYD_BUILD_DIR:-build}"
rayd="$root/$build/cli/rayd"
trials="${1:-20}"
epochs="${2:-8}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export RAYD_TEMP_DIR="$work/tmp"
cd "$work"

calc() { /usr/bin/python3 -c "print(round($1, 4))"; }

sweep() {  # sweep NAME TRAINABLE_YAML: seconds of a `rayd tune` of $trials one-report trials
  cat >"$work/$1.yaml" <<YAML
name: $1
trainable: $2
param_space: {iterations: 1, checkpoint: false, x: {uniform: [0, 1]}}
tune: {metric: loss, mode: min, num_samples: $trials, max_concurrent_trials: 2}
run: {storage_path: $work/results}
YAML
  local start end
  start=$(date +%s%N)
  "$rayd" tune "$work/$1.yaml" --progress-interval 3600 >"$work/$1.log" 2>&1 ||
    { tail -5 "$work/$1.log" >&2; return 1; }
  end=$(date +%s%N)
  calc "($end - $start) / 1e9"
}
python_trial="{command: [/usr/bin/python3, -c, \"import rayd.train as rt; rt.report({'loss': 1})\"], launcher: none}"
py_s=$(sweep python "$python_trial")
cc_s=$(sweep cpp toy_objective)
printf '%-11s %-44s %8s %8s\n' figure shape rayd peer
printf '%-11s %-44s %8.3f %8.3f   s/trial: Python command | C++ loop\n' overhead \
  "$trials one-report trials, 2 at once" \
  "$(calc "$py_s / $trials")" "$(calc "$cc_s / $trials")"

# The same script, the same sizes: under rayd, then by hand.
config="{\"epochs\": $epochs, \"train_size\": 8192, \"val_size\": 256}"
echo "$config" >"$work/config.json"
"$rayd" train --num-workers 2 --name ddp --storage-path "$work/results" --config "$config" -- \
  /usr/bin/python3 "$root/examples/python/mlp_ddp.py" >"$work/rayd_train.log" 2>&1 ||
  { tail -5 "$work/rayd_train.log" >&2; exit 1; }
under_rayd=$(/usr/bin/python3 -c '
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(sum(l["samples_per_s"] for l in lines[1:]) / max(1, len(lines) - 1))' \
  "$work/results/ddp/result.json")
port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
for rank in 0 1; do
  env MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" RANK=$rank LOCAL_RANK=$rank WORLD_SIZE=2 \
    LOCAL_WORLD_SIZE=2 OMP_NUM_THREADS=1 RAYD_CONFIG_FILE="$work/config.json" \
    PYTHONPATH="$root/python" /usr/bin/python3 "$root/examples/python/mlp_ddp.py" \
    >"$work/by_hand_$rank.log" 2>&1 &
done
wait
by_hand=$(/usr/bin/python3 -c '
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
print(sum(l["samples_per_s"] for l in lines[1:]) / max(1, len(lines) - 1))' \
  "$work/by_hand_0.log")
printf '%-11s %-44s %8.0f %8.0f   samples/s (epochs after the first); ratio %.3f\n' \
  throughput "mlp_ddp.py, 2 ranks Gloo, $epochs epochs" "$under_rayd" "$by_hand" \
  "$(calc "$under_rayd / $by_hand")"
