#!/usr/bin/env bash
# A Horovod job under rayd against the same job started horovodrun's way, in one run:
#   throughput   samples/s of examples/python/mlp_horovod.py on 2 ranks under
#                `rayd train --launcher horovod` (rayd's rendezvous, in rank 0's actor) next to
#                the same script on 2 processes started by bench/horovod_by_hand.py with the
#                same variables and horovodrun's own rendezvous server: the ratio (target >= 0.98)
#   first report seconds from `rayd train` starting (an embedded cluster) to the first report
#                in result.json, and from the by-hand start to its first report
# Needs Debian's python3-torch and a Horovod build (HOROVOD_DIR, default: the build tree's
# horovod/, which CMake unpacks from ../shared/horovod). Prints figures only; asserts nothing.
#
# The two are run alternately ROUNDS times (this machine's speed drifts by 10-20% over a minute)
# and each figure is the median over the rounds' epochs after the first.
#
#   RAYD_BUILD_DIR=build bench/horovod_bench.sh [EPOCHS] [ROUNDS]      default 8, 2
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build="${RAYD_BUILD_DIR:-build}"
rayd="$root/$build/cli/rayd"
horovod="${HOROVOD_DIR:-$root/$build/horovod}"
epochs="${1:-8}"
rounds="${2:-2}"
[ -d "$horovod/horovod" ] || { echo "horovod_bench: no Horovod at $horovod" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export RAYD_TEMP_DIR="$work/tmp"
cd "$work"
calc() { /usr/bin/python3 -c "print(round($1, 4))"; }
now() { /usr/bin/python3 -c 'import time; print(time.time())'; }
# The median samples/s over the epochs after the first, from files of JSON lines (result.json,
# or the by-hand run's output, where both ranks print theirs).
median_rate() {
  /usr/bin/python3 -c '
import json, statistics, sys
rates = [json.loads(l)["samples_per_s"] for f in sys.argv[1:] for l in open(f)
         if l.startswith("{") and json.loads(l)["epoch"] > 0]
print(statistics.median(rates))' "$@"
}

config="{\"epochs\": $epochs, \"train_size\": 8192, \"val_size\": 256}"
echo "$config" >"$work/config.json"
first_rayd=""
first_hand=""
for round in $(seq "$rounds"); do
  start=$(now)
  PYTHONPATH="$horovod" "$rayd" train --launcher horovod --np 2 --name "hvd$round" \
    --storage-path "$work/results" --config "$config" -- \
    /usr/bin/python3 "$root/examples/python/mlp_horovod.py" >"$work/rayd_train.log" 2>&1 ||
    { tail -5 "$work/rayd_train.log" >&2; exit 1; }
  first_rayd+=" $(/usr/bin/python3 -c '
import json, sys
print(round(json.loads(open(sys.argv[1]).readline())["timestamp"] - float(sys.argv[2]), 2))' \
    "$work/results/hvd$round/result.json" "$start")"

  start=$(now)
  (cd "$root/examples/python" && RAYD_CONFIG_FILE="$work/config.json" \
    PYTHONPATH="$horovod:$root/python" /usr/bin/python3 "$root/bench/horovod_by_hand.py" \
    --np 2 -- /usr/bin/python3 -u mlp_horovod.py) 2>&1 |
    while IFS= read -r line; do printf '%s %s\n' "$(now)" "$line"; done >"$work/by_hand.log"
  first_hand+=" $(calc "$(grep -m1 ' {' "$work/by_hand.log" | cut -d' ' -f1) - $start")"
  cut -d' ' -f2- "$work/by_hand.log" >"$work/by_hand$round.json"
done
under_rayd=$(median_rate "$work"/results/hvd*/result.json)
by_hand=$(median_rate "$work"/by_hand*.json)

printf '%-12s %-40s %8s %8s\n' figure shape rayd by-hand
printf '%-12s %-40s %8.0f %8.0f   samples/s (median, epochs after the first); ratio %.3f\n' \
  throughput "mlp_horovod.py, 2 ranks Gloo, $rounds x $epochs epochs" "$under_rayd" "$by_hand" \
  "$(calc "$under_rayd / $by_hand")"
printf '%-12s s from the start to the first report, by round (rayd: cluster start included):\n' \
  "first report"
printf '%-12s rayd%s | by hand%s\n' "" "$first_rayd" "$first_hand"
