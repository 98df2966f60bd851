#!/usr/bin/env bash
# rayd's search next to Optuna 3.1's (Debian's python3-optuna: scripts/install-deps.sh --peers),
# in one run:
#   1. TPE and random search on Branin and Hartmann-6: the median over seeds of the best value
#      after 25, 50 and 100 trials (lower is better); TPE's proposals per second.
#   2. On the example MLP's recorded learning curves (bench/search/data/mlp_curves.csv, made by
#      record_mlp.sh), through the simulator: the same for TPE and random; the budget TPE+ASHA
#      (BOHB-style) and Optuna's TPE+HyperbandPruner need to reach random+ASHA's final best; and
#      PASHA's budget next to ASHA's; and PASHA next to ASHA again on longer curves
#      (mlp_long_curves.csv), where they have more rungs to save.
#
#   RAYD_BUILD_DIR=build bench/search/run.sh [SEEDS]        default 20
set -euo pipefail
cd "$(dirname "$0")/../.."
seeds="${1:-20}"
build="${RAYD_BUILD_DIR:-build}"
RAYD_BUILD_DIR="$build" bench/build.sh search_bench search_replay_bench
rayd=$("$build/bench/search_bench" --seeds "$seeds" --json)
optuna=$(/usr/bin/python3 bench/search/optuna_peer.py --seeds "$seeds")
/usr/bin/python3 - "$rayd" "$optuna" "$seeds" <<'PY'
import json, sys
rayd, optuna, seeds = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
print(f"median over {seeds} seeds of the best value after N trials (lower is better)")
print(f"{'function':10} {'search':8} {'N':>4} {'rayd':>10} {'Optuna':>10}")
for fn in ("branin", "hartmann6"):
    for search in ("tpe", "random"):
        for n in ("25", "50", "100"):
            print(f"{fn:10} {search:8} {n:>4} {rayd[fn][search][n]:10.4f} {optuna[fn][search][n]:10.4f}")
    # rayd's TPE with proper kernel densities (TpeConfig::weight_by_bandwidth off); Optuna 3.1's
    # kernels weigh by their bandwidth, as rayd's default does.
    for n in ("25", "50", "100"):
        print(f"{fn:10} {'tpe*':8} {n:>4} {rayd[fn]['tpe_parzen'][n]:10.4f} {'':>10}")
print("tpe*: rayd's TPE with weight_by_bandwidth off (proper Parzen densities)")
p = rayd["proposals_per_s"]
print(f"rayd TPE proposals/s (Branin): {p['1000']:.0f} at 1,000 observations, {p['10000']:.1f} at 10,000")
PY

curves=bench/search/data/mlp_curves.csv
echo
echo "== the example MLP's recorded curves ($curves), through the simulator =="
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
"$build/bench/search_replay_bench" --curves "$curves" --seeds "$seeds" > "$scratch/rayd.json"
/usr/bin/python3 bench/search/optuna_replay_peer.py --curves "$curves" --seeds "$seeds" \
  > "$scratch/optuna.json"
/usr/bin/python3 bench/search/report_replay.py "$scratch/rayd.json" "$scratch/optuna.json"

long=bench/search/data/mlp_long_curves.csv
echo
echo "== PASHA and ASHA on longer curves ($long: 40 configs x 40 epochs, rungs 1/3/9/27/40) =="
"$build/bench/search_replay_bench" --curves "$long" --seeds "$seeds" \
  --arms asha_promotion,pasha > "$scratch/long.json"
/usr/bin/python3 bench/search/report_replay.py "$scratch/long.json"
