#!/usr/bin/env bash
# rayd's multi-objective search next to Optuna 3.1's (Debian's python3-optuna:
# scripts/install-deps.sh --peers), in one run (issue 53):
#   1. Problems with known fronts, one evaluation at a time: ZDT1, ZDT2, ZDT3 (30 variables,
#      reference (11, 11)) and DTLZ2 (3 objectives, 12 variables, reference (1.1, 1.1, 1.1))
#      (mo_objectives.h). The median over SEEDS seeds of the hypervolume of the first 100, 200
#      and 400 evaluations' front: rayd's NSGA-II (population 50), MOTPE and random search
#      (build/bench/mo_search_bench synthetic) next to Optuna's NSGAIISampler (population 50),
#      TPESampler on several objectives and RandomSampler (optuna_mo_peer.py). Optuna's MOTPE
#      runs TPE_SEEDS seeds and up to 200 evaluations only (about a second per proposal past
#      ~150 trials in Optuna 3.1); TPE_SEEDS=0 leaves it out.
#   2. A check that both sides compute the same hypervolume: Optuna's WFG and rayd's
#      Hypervolume on the same points (seed 1 of Optuna's NSGA-II on each problem).
#   3. A real problem: Fashion-MNIST MLPs, validation accuracy against parameter count, replayed
#      from recorded learning curves (data/fashion_mo_curves.csv: 504 configs x 9 epochs, made by
#      record_fashion_mo.py) through the Tuner's controller (Tuner::Simulate; the bench's own
#      loop, which makes the same decisions, where the Tuner does not replay objectives), one
#      trial at a time: rayd's NSGA-II (population 10), MOTPE and random search at full fidelity
#      and the same under MO-ASHA (grace 1 epoch, reduction factor RF, default 2: rungs at 1, 2,
#      4 and 8 of the 9 epochs; 3 leaves only 1 and 3), next to Optuna's
#      NSGA-II (population 10), MOTPE and random (a multi-objective Optuna study cannot prune).
#      The hypervolume (of (1 - accuracy, log10 params), reference: the table's best front's
#      nadir + 10%) against epochs spent, after 40 full-fidelity evaluations (360 epochs), and
#      the epochs each arm needs to reach Optuna's final hypervolume (issue 53's target for
#      MO-ASHA: <= 0.5x). REPLAY_SEEDS seeds.
#
#   RAYD_BUILD_DIR=build bench/search/mo_run.sh [SEEDS] [TPE_SEEDS] [REPLAY_SEEDS] [RF]
#       defaults 10, 3, 100, 2; about 40 minutes on two cores, most of it Optuna's MOTPE in
#       part 1 (TPE_SEEDS=10: about 2 hours)
set -euo pipefail
cd "$(dirname "$0")/../.."
seeds="${1:-10}"
tpe_seeds="${2:-3}"
replay_seeds="${3:-100}"
rf="${4:-2}"
build="${RAYD_BUILD_DIR:-build}"
bench="$build/bench/mo_search_bench"
RAYD_BUILD_DIR="$build" bench/build.sh mo_search_bench
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
arms=nsga2,random
if [[ "$tpe_seeds" != 0 ]]; then arms=nsga2,mo_tpe,random; fi

echo "== ZDT1-3 and DTLZ2, one evaluation at a time =="
"$bench" synthetic --seeds "$seeds" --json > "$scratch/rayd.json"
/usr/bin/python3 bench/search/optuna_mo_peer.py --seeds "$seeds" --tpe-seeds "$tpe_seeds" \
  --arms "$arms" --sample "$scratch/sample.json" > "$scratch/optuna.json"
/usr/bin/python3 bench/search/report_mo.py synthetic "$scratch/rayd.json" "$scratch/optuna.json"
echo
"$bench" hv "$scratch/sample.json" > "$scratch/rayd_hv.json"
/usr/bin/python3 bench/search/report_mo.py hvcheck "$scratch/sample.json" "$scratch/rayd_hv.json"

curves=bench/search/data/fashion_mo_curves.csv
echo
echo "== Fashion-MNIST MLPs, accuracy against parameters, replayed from $curves =="
# Through the Tuner's controller (Tuner::Simulate); the bench's own loop, which makes the same
# decisions, where the Tuner does not replay several objectives.
if ! "$bench" replay --curves "$curves" --seeds "$replay_seeds" --reduction-factor "$rf" \
    --simulator > "$scratch/rayd_replay.json" 2> "$scratch/replay.err"; then
  echo "(Tuner::Simulate: $(tail -1 "$scratch/replay.err"); the bench's own loop instead)"
  "$bench" replay --curves "$curves" --seeds "$replay_seeds" --reduction-factor "$rf" \
    > "$scratch/rayd_replay.json"
fi
/usr/bin/python3 bench/search/optuna_mo_replay_peer.py --curves "$curves" \
  --seeds "$replay_seeds" > "$scratch/optuna_replay.json"
/usr/bin/python3 bench/search/report_mo.py replay "$scratch/rayd_replay.json" \
  "$scratch/optuna_replay.json"
