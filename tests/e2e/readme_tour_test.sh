#!/usr/bin/env bash
# The README's tour, as a new user follows it right after the quick start: first the quick
# start's sweep (`rayd tune examples/tune.yaml --overwrite`, as scripts/quickstart.sh runs it),
# then every command of README.md's "A five-minute tour" block, in order, read from README.md
# itself, so the test breaks when the README does. Each command must exit 0; the tour's sweep
# must go to a directory of its own beside the quick start's, and both must be complete.
#
#   tests/e2e/readme_tour_test.sh RAYD_BIN QUICKSTART_BIN SOURCE_DIR
#
# The commands run in a scratch directory (with examples/ and build/examples/quickstart linked
# into it) with `rayd` on PATH and a temp root of their own; the daemons are stopped on exit.
set -uo pipefail
rayd_bin="${1:?usage: readme_tour_test.sh RAYD_BIN QUICKSTART_BIN SOURCE_DIR}"
quickstart_bin="${2:?}"
source_dir="${3:?}"

work="$(mktemp -d /tmp/rayd-tour.XXXXXX)"
export RAYD_TEMP_DIR="$work/tmp"
mkdir -p "$RAYD_TEMP_DIR" "$work/bin" "$work/build/examples"
ln -s "$rayd_bin" "$work/bin/rayd"
ln -s "$quickstart_bin" "$work/build/examples/quickstart"
ln -s "$source_dir/examples" "$work/examples"
export PATH="$work/bin:$PATH"
unset RAYD_ADDRESS RAYD_TOKEN
cleanup() {
  (cd "$work" && rayd stop >/dev/null 2>&1)
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  for log in "$RAYD_TEMP_DIR"/session_*/logs/*.log; do
    [ -f "$log" ] && { echo "--- $log"; tail -20 "$log"; }
  done
  exit 1
}

# Runs one command line of the tour in the scratch directory, with a deadline; its output goes
# to $work/out.N and is echoed.
step=0
run() {
  step=$((step + 1))
  echo "==> $1"
  (cd "$work" && timeout 300 bash -c "$1") >"$work/out.$step" 2>&1
  local rc=$?
  cat "$work/out.$step"
  [ "$rc" -eq 0 ] || fail "'$1' exited $rc"
}

run "rayd tune examples/tune.yaml --overwrite"
grep -q "^6 trials: 6 terminated, 0 errors" "$work/out.$step" || fail "the quick start's sweep"

# The tour: the lines of the ```sh block under "## A five-minute tour", comments dropped.
mapfile -t commands < <(awk '
  /^## A five-minute tour/ { tour = 1; next }
  tour && /^```sh/ { block = 1; next }
  block && /^```/ { exit }
  block { sub(/[[:space:]]+#.*$/, ""); if ($0 !~ /^[[:space:]]*(#|$)/) print }
' "$source_dir/README.md")
[ "${#commands[@]}" -ge 5 ] || fail "found ${#commands[@]} commands in README.md's tour"
for command in "${commands[@]}"; do
  run "$command"
  case "$command" in
    "rayd status"*)
      [ "$(sed -n '/^Active:/,/^Dead:/p' "$work/out.$step" | grep -c ' node_')" -eq 2 ] ||
        fail "rayd status does not show the two nodes"
      grep -q " 0/4 CPU" "$work/out.$step" || fail "rayd status does not count their 4 CPUs" ;;
    "rayd tune"*)
      grep -q "holds an earlier sweep" "$work/out.$step" || fail "no word of the earlier sweep"
      grep -q "^6 trials: 6 terminated, 0 errors" "$work/out.$step" || fail "the tour's sweep" ;;
  esac
done

# Both sweeps are whole, each in its own directory.
shopt -s nullglob
dirs=("$work"/rayd_results/fashion-asha "$work"/rayd_results/fashion-asha_*)
[ "${#dirs[@]}" -eq 2 ] || fail "expected two experiment directories, found: ${dirs[*]}"
for d in "${dirs[@]}"; do
  [ -f "$d/experiment_state.json" ] || fail "$d has no experiment_state.json"
done
echo "readme_tour: ${#commands[@]} commands passed"
