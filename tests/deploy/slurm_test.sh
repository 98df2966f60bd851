#!/usr/bin/env bash
# deploy/slurm/rayd.sbatch under a real Slurm on this machine: munged, slurmctld and slurmd
# are started here with a configuration of their own (a temp directory, free ports, this host
# as the one node), then
#   1. a job runs a sweep to the end (`sbatch --wait`): every trial TERMINATED;
#   2. a job running a long sweep is `scancel`led: the job ends and no rayd process of it stays.
# Exits 77 (CTest: skipped) where Slurm cannot run: not root, or slurm-wlm/munge missing.
# Every daemon this starts is stopped on exit.
#
#   tests/deploy/slurm_test.sh RAYD_BIN
set -uo pipefail
rayd="${1:?usage: slurm_test.sh RAYD_BIN}"
sbatch_script="$(cd "$(dirname "$0")/../.." && pwd)/deploy/slurm/rayd.sbatch"

skip() { echo "skipped: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "Slurm's daemons need root here"
for bin in munged slurmctld slurmd sbatch squeue scancel sinfo; do
  command -v "$bin" >/dev/null || skip "$bin not found (scripts/install-deps.sh installs slurm-wlm and munge)"
done

work="$(mktemp -d /tmp/rayd-slurm-test.XXXXXX)"
daemons=()
cleanup() {
  for pid in "${daemons[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${daemons[@]}"; do wait "$pid" 2>/dev/null; done
  pkill -KILL -f "$work" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  for log in "$work"/log/*.log "$work"/job/*.out; do
    [ -f "$log" ] && { echo "--- $log"; tail -30 "$log"; }
  done
  exit 1
}
# Polls `cmd` every 0.2 s until it succeeds or `seconds` pass.
wait_for() {
  local seconds="$1"; shift
  local deadline=$((SECONDS + seconds))
  until "$@"; do
    [ "$SECONDS" -ge "$deadline" ] && return 1
    sleep 0.2
  done
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

mkdir -p "$work"/{state,spool,log,run,munge,job}
chmod 755 "$work" "$work/munge"  # munged wants its socket's directories searchable by all
head -c 1024 /dev/urandom >"$work/munge/munge.key"
chmod 400 "$work/munge/munge.key"
munged -F --key-file="$work/munge/munge.key" --socket="$work/munge/munge.socket" \
  --pid-file="$work/munge/munged.pid" --log-file="$work/log/munged.log" \
  --seed-file="$work/munge/munged.seed" &
daemons+=("$!")
wait_for 10 test -S "$work/munge/munge.socket" || fail "munged did not start"

host="$(hostname -s)"
memory_mb=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 512 ))
export SLURM_CONF="$work/slurm.conf"
# The jobs' heads listen on a free port (sbatch passes the environment on), not the default
# 6380 that other tests (e2e.readme_tour, following the README) may hold at the same time.
RAYD_PORT="$(free_port)"
export RAYD_PORT
cat >"$SLURM_CONF" <<CONF
ClusterName=raydtest
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$work/munge/munge.socket
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/run/slurmctld.pid
SlurmdPidFile=$work/run/slurmd.pid
SlurmctldLogFile=$work/log/slurmctld.log
SlurmdLogFile=$work/log/slurmd.log
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
NodeName=$host CPUs=$(nproc) RealMemory=$memory_mb State=UNKNOWN
PartitionName=rayd Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
slurmctld -D -f "$SLURM_CONF" &
daemons+=("$!")
slurmd -D -f "$SLURM_CONF" &
daemons+=("$!")
node_idle() { [ "$(sinfo -h -o %t 2>/dev/null)" = "idle" ]; }
wait_for 60 node_idle || fail "the Slurm node never became idle: $(sinfo 2>&1)"

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
