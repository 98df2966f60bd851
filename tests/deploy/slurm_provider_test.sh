#!/usr/bin/env bash
# The autoscaler's Slurm provider under a real Slurm on this machine (slurm_lib.sh starts it),
# driven through slurm_provider_driver against a real head:
#   1. create: sbatch submits a job whose node joins the head with the type's resources and
#      the node-type and instance (= job id) labels; the token reaches it by the environment;
#   2. list (after adopting the job id, as a restarted head would): the job runs, with the
#      time left of its 30-minute limit;
#   3. terminate: scancel ends the job, and its node leaves the cluster.
# Exits 77 (CTest: skipped) where Slurm cannot run: not root, or slurm-wlm/munge missing.
#
#   tests/deploy/slurm_provider_test.sh RAYD_BIN DRIVER_BIN
set -uo pipefail
rayd="${1:?usage: slurm_provider_test.sh RAYD_BIN DRIVER_BIN}"
driver="${2:?usage: slurm_provider_test.sh RAYD_BIN DRIVER_BIN}"

source "$(dirname "$0")/slurm_lib.sh"
slurm_require
slurm_start
stop_all() {
  "$rayd" stop --force --temp-dir "$work/rayd" >/dev/null 2>&1
  slurm_cleanup
}
trap stop_all EXIT

# The head, and the temp root the jobs' nodes use too (sbatch passes RAYD_TEMP_DIR on).
export RAYD_TEMP_DIR="$work/rayd"
port="$(free_port)"
address="127.0.0.1:$port"
"$rayd" start --head --port "$port" --num-cpus 0 --num-gpus 0 --temp-dir "$RAYD_TEMP_DIR" \
  >"$work/log/head-start.log" 2>&1 || fail "the head did not start: $(cat "$work/log/head-start.log")"
RAYD_TOKEN="$(cat "$RAYD_TEMP_DIR/session_latest/token")" || fail "no token"
export RAYD_TOKEN
drive() { "$driver" "$address" "$work/job" "$rayd" 00:30:00 "$@"; }

# node_state ID: ALIVE, DEAD or MISSING for the node whose instance label is ID.
node_state() {
  "$rayd" status --address "$address" --format json 2>/dev/null | python3 -c '
import json, sys
nodes = [n for n in json.load(sys.stdin)["nodes"]
         if n["labels"].get("rayd.io/autoscaler-instance") == sys.argv[1]]
alive = [n for n in nodes if n["state"] == "ALIVE"]
print("ALIVE" if alive else "DEAD" if nodes else "MISSING")' "$1"
}
node_alive() { [ "$(node_state "$1")" = "ALIVE" ]; }
node_gone() { [ "$(node_state "$1")" != "ALIVE" ]; }

# 1. Create.
created="$(drive create cpu1 1)" || fail "create failed: $created"
read -r job state <<<"$created"
[[ "$job" =~ ^[0-9]+$ ]] || fail "create printed no job id: $created"
[ "$state" = "pending" ] || fail "a new job should be pending: $created"
squeue -h -j "$job" -o %j | grep -qx "rayd-cpu1" || fail "no job rayd-cpu1 $job in the queue"
wait_for 120 node_alive "$job" || fail "job $job's node never joined: $(squeue -j "$job" 2>&1)"
node_json="$("$rayd" status --address "$address" --format json | python3 -c '
import json, sys
n = [n for n in json.load(sys.stdin)["nodes"]
     if n["labels"].get("rayd.io/autoscaler-instance") == sys.argv[1]][0]
print(json.dumps({"CPU": float(n["total"].get("CPU", 0)),
                  "type": n["labels"].get("rayd.io/node-type"),
                  "zone": n["labels"].get("zone")}, sort_keys=True))' "$job")"
[ "$node_json" = '{"CPU": 1.0, "type": "cpu1", "zone": "slurm"}' ] ||
  fail "job $job's node has $node_json"
if pgrep -af "rayd.*$job" | grep -qF "$RAYD_TOKEN"; then fail "the token is on a command line"; fi
echo "ok: sbatch started node $job, which joined with its type and labels"

# 2. List, by a provider that adopted the job.
listed="$(drive list "$job")" || fail "list failed: $listed"
read -r id state left detail <<<"$listed"
[ "$id" = "$job" ] && [ "$state" = "running" ] || fail "list: $listed"
[[ "$left" =~ ^[0-9]+$ ]] && [ "$left" -gt 1500 ] && [ "$left" -le 1800 ] ||
  fail "time left of a 30-minute job: $listed"
[ "$detail" = "RUNNING" ] || fail "detail: $listed"
echo "ok: list shows job $job running with ${left}s left"

# 3. Terminate.
terminated="$(drive terminate "$job")" || fail "terminate failed: $terminated"
job_gone() { [ -z "$(squeue -h -j "$job" 2>/dev/null)" ]; }
wait_for 90 job_gone || fail "job $job still in the queue after terminate"
wait_for 30 node_gone "$job" || fail "job $job's node is still alive"
listed="$(drive list "$job")" || fail "list failed: $listed"
[ -z "$listed" ] || fail "list after terminate: $listed"
echo "ok: scancel ended job $job and its node left"
