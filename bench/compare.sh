#!/usr/bin/env bash
# Runs rayd's benchmarks and the peers' in one go and prints the ratios (rayd speed / peer
# speed: above 1 = rayd faster). Pairs: `rayd microbenchmark` vs Dask (bench/peers/dask_bench.py),
# bench/train_bench vs Python torch DDP (bench/peers/torch_ddp.py), bench/tune_bench vs Optuna
# (bench/peers/optuna_sweep.py). A pair whose binary is not built or whose Python packages are
# missing is skipped with a message (scripts/install-deps.sh --peers installs the peers).
#
#   RAYD_BUILD_DIR=build bench/compare.sh [--json FILE] [--quick] [--pairs micro,train,tune]
#
# The full run takes a few minutes on 2 cores; run it on an otherwise idle machine, as every
# figure is sensitive to CPU contention. The table is printed on stdout, progress on stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
export RAYD_BUILD_DIR="${RAYD_BUILD_DIR:-build}"
bench/build.sh rayd train_bench tune_bench
# Debian's interpreter: the python on PATH may not see Debian's python3-* packages.
exec /usr/bin/python3 bench/peers/compare.py "$@"
