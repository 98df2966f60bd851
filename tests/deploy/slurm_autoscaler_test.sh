#!/usr/bin/env bash
# The whole autoscaler with the slurm provider, under a real Slurm on this machine
# (slurm_lib.sh starts it): a head started with `--autoscaler slurm.yaml` (one type cpu1,
# {CPU: 1}, at most one node), then
#   1. `rayd request-resources --cpus 1`: the autoscaler submits a job rayd-cpu1, whose node
#      joins with the instance label = the job id;
#   2. the request withdrawn: after idle_timeout_s the node is drained, its job cancelled
#      (it leaves squeue) and the node is gone;
#   3. requested again, then `rayd stop` of the head: its shutdown cancels the job it launched
#      (Slurm says CANCELLED: the head's scancel ended it, not its node's exit);
#   4. a second head whose jobs have a 5-minute limit and drain_before_limit_s 600: its node is
#      drained as soon as it joins ("ends in"), and its job ends; `rayd stop` leaves no job.
# The jobs' nodes keep their sessions in a temp root of their own (RAYD_TEMP_DIR, which
# sbatch passes on), so `rayd stop --temp-dir HEAD_ROOT` stops the head alone: only the head's
# own shutdown can end them.
# Exits 77 (CTest: skipped) where Slurm cannot run: not root, or slurm-wlm/munge missing.
#
#   tests/deploy/slurm_autoscaler_test.sh RAYD_BIN
set -uo pipefail
rayd="${1:?usage: slurm_autoscaler_test.sh RAYD_BIN}"

source "$(dirname "$0")/slurm_lib.sh"
slurm_require
slurm_start
stop_all() {
  local root
  for root in "$work"/head-1 "$work"/head-2 "$work"/nodes; do
    "$rayd" stop --force --temp-dir "$root" >/dev/null 2>&1
  done
  # A job still running when slurmd is told to stop keeps it (and this script) waiting.
  scancel --user="$(id -u)" --name=rayd-cpu1 >/dev/null 2>&1 && wait_for 60 no_rayd_jobs
  slurm_cleanup
}
trap stop_all EXIT
start_s=$SECONDS

# start_head N TIME_LIMIT [EXTRA_PROVIDER_KEYS]: a head on a free port whose autoscaler is
# that of head-N.yaml; sets $head_root.
start_head() {
  head_root="$work/head-$1"
  cat >"$work/head-$1.yaml" <<YAML
provider: {type: slurm, partition: rayd, time_limit: "$2"${3:+, $3}}
idle_timeout_s: 3
update_interval_s: 0.5
node_types:
  cpu1:
    resources: {CPU: 1}
    max_nodes: 1
YAML
  RAYD_TEMP_DIR="$work/nodes" "$rayd" start --head --port "$(free_port)" --num-cpus 0 \
    --num-gpus 0 --temp-dir "$head_root" --autoscaler "$work/head-$1.yaml" \
    >"$work/log/head-$1-start.log" 2>&1 ||
    fail "head $1 did not start: $(cat "$work/log/head-$1-start.log")"
}

status_json() { "$rayd" status --temp-dir "$head_root" --format json 2>/dev/null; }
# ask EXPR ARGS...: prints the Python expression EXPR over the head's status (`s`, its
# autoscaler `a`, the nodes whose instance label is ARGS[0] `mine`; argv: ARGS).
ask() {
  local expr="$1"; shift
  status_json | python3 -c "
import json, sys
argv = sys.argv[1:]
s = json.load(sys.stdin)
a = s.get('autoscaler') or {}
mine = [n for n in s.get('nodes', [])
        if argv and n['labels'].get('rayd.io/autoscaler-instance') == argv[0]]
print($expr)" "$@"
}
# node_state JOB: ALIVE, DEAD or MISSING for the node whose instance label is JOB.
node_state() {
  ask "'ALIVE' if any(n['state'] == 'ALIVE' for n in mine) else 'DEAD' if mine else 'MISSING'" "$1"
}
node_alive() { [ "$(node_state "$1")" = "ALIVE" ]; }
node_left() { [ "$(node_state "$1")" = "DEAD" ]; }
# event TEXT: an autoscaler event contains TEXT.
event() { [ "$(ask 'any(argv[1] in e["text"] for e in a.get("events", []))' - "$1")" = True ]; }
events() { ask '"\n".join(e["text"] for e in a.get("events", []))'; }
# The rayd jobs in the queue ("ID NAME" a line), and the id of the one rayd-cpu1 job.
rayd_jobs() { squeue -h -o '%i %j' 2>/dev/null | awk '$2 ~ /^rayd-/'; }
no_rayd_jobs() { [ -z "$(rayd_jobs)" ]; }
cpu1_job() { job="$(squeue -h --name=rayd-cpu1 -o %i 2>/dev/null | head -1)"; [ -n "$job" ]; }
job_gone() { [ -z "$(squeue -h -j "$1" 2>/dev/null)" ]; }
job_state() { scontrol show job "$1" 2>/dev/null | grep -oE 'JobState=[A-Z_]+' | cut -d= -f2; }
request() { "$rayd" request-resources --temp-dir "$head_root" "$@" >/dev/null || fail "request-resources $*"; }

# ---- head 1: a 30-minute limit (the default drain_before_limit_s, 120 s, never comes).
start_head 1 00:30:00
[ "$(ask 'a.get("provider")')" = slurm ] || fail "no slurm autoscaler in the status: $(status_json)"
"$rayd" status --temp-dir "$head_root" | grep -q '^Autoscaler (slurm provider' ||
  fail "rayd status shows no autoscaler section"

# 1. A request launches a job, whose node joins.
t0=$SECONDS
request --cpus 1
wait_for 60 cpu1_job || fail "no rayd-cpu1 job in the queue: $(squeue 2>&1) $(events)"
job1="$job"
wait_for 120 node_alive "$job1" ||
  fail "job $job1's node never joined: $(squeue -j "$job1" 2>&1) $(events)"
# The autoscaler's state is published after its next update.
one_running() { [ "$(ask '[t["running"] for t in a["node_types"]] + [len(a["instances"])]')" = "[1, 1]" ]; }
wait_for 10 one_running || fail "one cpu1 running and one instance expected: $(ask 'a')"
[ "$(ask '[i["id"] for i in a["instances"]]')" = "['$job1']" ] ||
  fail "the instance is not job $job1: $(ask 'a["instances"]')"
[ "$(ask 'mine[0]["labels"].get("rayd.io/node-type")' "$job1")" = cpu1 ] ||
  fail "job $job1's node has no node-type label cpu1"
echo "ok: request-resources --cpus 1 -> Slurm job $job1, whose node joined ($((SECONDS - t0)) s)"

# 2. Withdrawn: idle past idle_timeout_s, the node is drained, its job cancelled.
t0=$SECONDS
request --name cli --clear
wait_for 60 event "draining node" || fail "the idle node was never drained: $(events)"
idle="$(events | grep -oE 'idle for [0-9]+ s' | head -1 | grep -oE '[0-9]+')"
[ -n "$idle" ] && [ "$idle" -ge 3 ] || fail "not drained for idle_timeout_s 3: $(events)"
wait_for 60 job_gone "$job1" || fail "job $job1 is still queued after its node's drain: $(events)"
wait_for 30 node_left "$job1" || fail "job $job1's node is still alive"
wait_for 10 event "terminating instance $job1" || fail "instance $job1 not terminated: $(events)"
[ "$(ask '[len(a["instances"]), a["counters"]["launched"], a["counters"]["terminated"]]')" = \
  "[0, 1, 1]" ] || fail "after the drain: $(ask 'a')"
echo "ok: withdrawn: node drained when idle, job $job1 ended, node gone ($((SECONDS - t0)) s)"

# 3. The head's shutdown cancels what it launched.
t0=$SECONDS
request --cpus 1
wait_for 60 cpu1_job || fail "no new rayd-cpu1 job: $(events)"
job2="$job"
[ "$job2" != "$job1" ] || fail "job $job1 queued again"
wait_for 120 node_alive "$job2" || fail "job $job2's node never joined: $(events)"
"$rayd" stop --temp-dir "$head_root" >/dev/null || fail "rayd stop of head 1 failed"
wait_for 60 no_rayd_jobs || fail "rayd jobs left after the head stopped: $(rayd_jobs)"
[ "$(job_state "$job2")" = CANCELLED ] ||
  fail "job $job2 ended $(job_state "$job2"), not CANCELLED by the head's shutdown"
echo "ok: rayd stop of the head cancelled job $job2 ($((SECONDS - t0)) s)"

# ---- head 2: a 5-minute limit, drained 600 s before it: at once.
start_head 2 00:05:00 "drain_before_limit_s: 600"
t0=$SECONDS
request --cpus 1
wait_for 60 cpu1_job || fail "no rayd-cpu1 job for head 2: $(events)"
job3="$job"
wait_for 120 event "ends in" || fail "job $job3's node was not drained for its time limit: $(events)"
# The drain stands; without the request the autoscaler launches nothing more.
request --name cli --clear
[ "$(ask 'a["counters"]["drained"] >= 1')" = True ] ||
  fail "the time-limit drain is not counted as drained: $(ask 'a["counters"]')"
left="$(events | grep -oE 'slurm instance ends in [0-9]+ s' | head -1 | grep -oE '[0-9]+')"
[ -n "$left" ] && [ "$left" -le 300 ] && [ "$left" -gt 200 ] ||
  fail "the drain should say the job ends in under 300 s: $(events)"
wait_for 60 job_gone "$job3" || fail "job $job3 is still queued after its drain: $(events)"
wait_for 30 node_left "$job3" || fail "job $job3's node never joined or did not leave"
wait_for 10 event "terminating instance $job3" || fail "instance $job3 not terminated: $(events)"
echo "ok: time limit: job $job3's node drained ${left} s before its end, job ended ($((SECONDS - t0)) s)"

"$rayd" stop --temp-dir "$head_root" >/dev/null || fail "rayd stop of head 2 failed"
wait_for 60 no_rayd_jobs || fail "rayd jobs left after head 2 stopped: $(rayd_jobs)"
echo "ok: no rayd job left in squeue ($((SECONDS - start_s)) s in all)"
