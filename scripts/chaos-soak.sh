#!/usr/bin/env bash
# The chaos soak of tests/fault/chaos_test.cc (issue 25): sweeps of 2-rank checkpointing trials
# on the network-namespace test bed while a seeded chaos driver SIGKILLs workers, nodes, the
# Redis-backed head and the driver and cuts links; prints the "CHAOS" report table and exits
# with the test's code (77: skipped, no root or iproute2).
#
#   scripts/chaos-soak.sh                 the CI length (RAYD_CHAOS_SECONDS' default, ~2 min)
#   scripts/chaos-soak.sh --long          30 minutes of chaos
#   scripts/chaos-soak.sh --minutes M     M minutes of chaos
#   scripts/chaos-soak.sh --seed N        another seed (default: the test's fixed one)
#
# Needs root and a build of fault_test ($RAYD_BUILD_DIR, default build/). The chaos window is
# the time faults are injected in; setup, the last sweep's end and the checks come on top.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
}

seconds=""
seed=""
while [ $# -gt 0 ]; do
  case "$1" in
    --long) seconds=1800 ;;
    --minutes)
      [ $# -ge 2 ] || usage
      seconds=$(($2 * 60))
      shift
      ;;
    --seed)
      [ $# -ge 2 ] || usage
      seed="$2"
      shift
      ;;
    -h | --help) usage ;;
    *)
      echo "chaos-soak.sh: unknown argument '$1'" >&2
      usage
      ;;
  esac
  shift
done

binary="${RAYD_BUILD_DIR:-build}/tests/fault/fault_test"
if [ ! -x "$binary" ]; then
  echo "chaos-soak.sh: $binary is missing: build it first (ninja -C build fault_test)" >&2
  exit 1
fi
[ -z "$seconds" ] || export RAYD_CHAOS_SECONDS="$seconds"
[ -z "$seed" ] || export RAYD_CHAOS_SEED="$seed"
set +e
"$binary" -w NoTests \
  "chaos soak: seeded worker node link head and driver faults during checkpointing sweeps lose nothing"
rc=$?
set -e
exit "$rc"
