# Sourced by bench/data/*.sh: a work directory removed on exit, and BURNERS=N busy loops beside
# the benchmark (killed on exit), so that a figure can be taken on a busy machine too.
#
#   source bench/data/common.sh
#   bench_work rayd-bench-name      # sets $work
#   start_burners                   # after the set-up that should not compete with them

burners=()
bench_cleanup() {
  for pid in "${burners[@]}"; do kill "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}

bench_work() {
  work="$(mktemp -d "/tmp/$1.XXXXXX")"
  trap bench_cleanup EXIT
}

start_burners() {
  for _ in $(seq 1 "${BURNERS:-0}"); do
    (while :; do :; done) &
    burners+=($!)
  done
}
