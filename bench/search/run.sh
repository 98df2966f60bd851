#!/usr/bin/env bash
# rayd's TPE next to Optuna's TPESampler (Debian's python3-optuna: scripts/install-deps.sh
# --peers), and both next to random search, on Branin and Hartmann-6: the median over seeds of
# the best value after 25, 50 and 100 trials (lower is better), in one run.
#
#   RAYD_BUILD_DIR=build bench/search/run.sh [SEEDS]        default 20
set -euo pipefail
cd "$(dirname "$0")/../.."
seeds="${1:-20}"
rayd=$("${RAYD_BUILD_DIR:-build}/bench/search_bench" --seeds "$seeds" --json)
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
p = rayd["proposals_per_s"]
print(f"rayd TPE proposals/s (Branin): {p['1000']:.0f} at 1,000 observations, {p['10000']:.1f} at 10,000")
PY
