#!/usr/bin/env bash
# deploy/slurm/rayd.sbatch under a real Slurm on this machine: munged, slurmctld and slurmd
# are started here with a configuration of their own (a temp directory, free ports, this host
# as the one node), then
#   1. a job runs a sweep to the end (`sbatch --wait`): every trial TERMINATED;
#   2. a job running a long sweep is `scancel`led: the job ends and no rayd process of it stays.
# Exits 77 (CTest: skipped) where Slurm cannot run: not root, or slurm-wlm/munge missing.
# Every daemon this starts is stopped on exit (slurm_lib.sh starts Slurm).
#
#   tests/deploy/slurm_test.sh RAYD_BIN
set -uo pipefail
rayd="${1:?usage: slurm_test.sh RAYD_BIN}"
sbatch_script="$(cd "$(dirname "$0")/../.." && pwd)/deploy/slurm/rayd.sbatch"

source "$(dirname "$0")/slurm_lib.sh"
slurm_require
slurm_start

# The jobs' heads listen on a free port (sbatch passes the environment on), not the default
# 6380 that other tests (e2e.readme_tour, following the README) may hold at the same time.
RAYD_PORT="$(free_port)"
export RAYD_PORT

sweep() {  # sweep NAME ITERATIONS WORK_MS: a toy sweep's tune.yaml, printed
  cat >"$work/job/$1.yaml" <<YAML
name: $1
trainable: toy_objective
param_space:
  x: {uniform: [0.0, 6.0]}
  lr: 0.1
  iterations: $2
  work_ms: $3
tune:
  metric: loss
  mode: min
  num_samples: 2
  seed: 1
run:
  storage_path: $work/job/results
YAML
  echo "$work/job/$1.yaml"
}
# No process runs with `dir` (a job's rayd temp dir) on its command line.
none_under() { ! pgrep -f "$1" >/dev/null; }

# 1. A sweep to the end.
export RAYD_BIN="$rayd"
RAYD_TEMP_DIR="$work/job/temp-1" TUNE_YAML="$(sweep short 4 20)" \
  sbatch --wait --nodes=1 --output="$work/job/short.out" "$sbatch_script" >/dev/null ||
  fail "the sweep's job failed"
state="$work/job/results/short/experiment_state.json"
[ -f "$state" ] || fail "no $state"
terminated="$(grep -o '"status": *"TERMINATED"' "$state" | wc -l)"
[ "$terminated" -eq 2 ] || fail "$terminated of 2 trials TERMINATED in $state"
wait_for 10 none_under "$work/job/temp-1" ||
  fail "rayd processes outlived the job: $(pgrep -af "$work/job/temp-1")"
echo "ok: sbatch ran a sweep to the end under Slurm: 2 trials TERMINATED"

# 2. scancel of a running sweep.
job="$(RAYD_TEMP_DIR="$work/job/temp-2" TUNE_YAML="$(sweep long 1000 50)" \
  sbatch --parsable --nodes=1 --output="$work/job/long.out" "$sbatch_script")" ||
  fail "sbatch refused the long sweep"
trial_running() { grep -q "RUNNING" "$work/job/long.out" 2>/dev/null; }
wait_for 120 trial_running || fail "the long sweep never showed a running trial"
pgrep -f "$work/job/temp-2" >/dev/null || fail "no rayd process of the running job"
scancel "$job"
job_gone() { [ -z "$(squeue -h -j "$job" 2>/dev/null)" ]; }
wait_for 90 job_gone || fail "job $job still in the queue after scancel"
wait_for 30 none_under "$work/job/temp-2" ||
  fail "rayd processes left after scancel: $(pgrep -af "$work/job/temp-2")"
echo "ok: scancel of a running sweep left no rayd process"
