# A Slurm of the test's own on this machine, for the deploy tests to source: munged,
# slurmctld and slurmd started with a configuration of their own (a temp directory, free
# ports, this host as the one node, partition "rayd"), stopped when the test exits.
#
#   source tests/deploy/slurm_lib.sh
#   slurm_require     # exits 77 (CTest: skipped) where Slurm cannot run: not root, or
#                     # slurm-wlm/munge missing
#   slurm_start       # sets $work (the temp directory: log/ job/ ...), exports SLURM_CONF,
#                     # and stops everything on exit (slurm_cleanup; a test that needs more
#                     # done on exit sets its own EXIT trap and calls slurm_cleanup from it)
#
# Also: skip WHY, fail WHY (prints Slurm's and the jobs' logs), wait_for SECONDS CMD...,
# free_port.

skip() { echo "skipped: $*"; exit 77; }

slurm_require() {
  [ "$(id -u)" -eq 0 ] || skip "Slurm's daemons need root here"
  local bin
  for bin in munged slurmctld slurmd sbatch squeue scancel sinfo; do
    command -v "$bin" >/dev/null || skip "$bin not found (scripts/install-deps.sh installs slurm-wlm and munge)"
  done
}

slurm_cleanup() {
  for pid in "${daemons[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${daemons[@]}"; do wait "$pid" 2>/dev/null; done
  pkill -KILL -f "$work" 2>/dev/null
  rm -rf "$work"
}

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

slurm_node_idle() { [ "$(sinfo -h -o %t 2>/dev/null)" = "idle" ]; }

slurm_start() {
  work="$(mktemp -d /tmp/rayd-slurm-test.XXXXXX)"
  daemons=()
  trap slurm_cleanup EXIT

  mkdir -p "$work"/{state,spool,log,run,munge,job}
  chmod 755 "$work" "$work/munge"  # munged wants its socket's directories searchable by all
  head -c 1024 /dev/urandom >"$work/munge/munge.key"
  chmod 400 "$work/munge/munge.key"
  munged -F --key-file="$work/munge/munge.key" --socket="$work/munge/munge.socket" \
    --pid-file="$work/munge/munged.pid" --log-file="$work/log/munged.log" \
    --seed-file="$work/munge/munged.seed" &
  daemons+=("$!")
  wait_for 10 test -S "$work/munge/munge.socket" || fail "munged did not start"

  local host memory_mb
  host="$(hostname -s)"
  memory_mb=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 512 ))
  export SLURM_CONF="$work/slurm.conf"
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
  wait_for 60 slurm_node_idle || fail "the Slurm node never became idle: $(sinfo 2>&1)"
}
