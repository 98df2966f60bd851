#!/usr/bin/env bash
# scripts/check-layers.sh must fail on each kind of crossing and pass a tree without one.
set -uo pipefail
script="$1"
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
failures=0

expect() {  # expect <exit code> <text the output must hold> <what>
  local out rc
  out=$("$script" "$tree" 2>&1)
  rc=$?
  if [ "$rc" -ne "$1" ] || ! grep -qF -- "$2" <<<"$out"; then
    echo "FAIL: $3: exit $rc (want $1), output:"
    echo "$out"
    failures=$((failures + 1))
  fi
}

mkdir -p "$tree"/runtime/src/{common,core,gcs,node,head,api} "$tree"/runtime/include/rayd/runtime \
  "$tree"/cli "$tree"/train "$tree"/base/include/rayd/base
echo '#include "common/ids.h"' >"$tree/runtime/src/core/worker.cc"
echo '#include "gcs/gcs_server.h"' >"$tree/runtime/src/head/head.cc"
echo '#include "rayd/runtime/cluster.h"' >"$tree/cli/status.cc"
expect 0 "every include respects the layers" "a clean tree"

echo '#include "gcs/gcs_server.h"' >>"$tree/runtime/src/core/worker.cc"
expect 1 "runtime/src/core/worker.cc:2: \"gcs/gcs_server.h\"" "core including gcs"
sed -i '2d' "$tree/runtime/src/core/worker.cc"

echo '#include "core/core_worker.h"' >"$tree/runtime/src/node/lease.cc"
expect 1 "runtime role 'node' may include only" "node including core"
rm "$tree/runtime/src/node/lease.cc"

echo '#include "common/cluster_view.h"' >>"$tree/cli/status.cc"
expect 1 "use public headers" "cli reaching into runtime/src"
sed -i '2d' "$tree/cli/status.cc"

# shellcheck disable=SC2016  # a CMake line, written as is
echo 'target_include_directories(rayd PRIVATE ${PROJECT_SOURCE_DIR}/runtime/src)' >"$tree/cli/CMakeLists.txt"
expect 1 "no runtime/src include path" "cli's include path"
rm "$tree/cli/CMakeLists.txt"

echo '#include "rayd/tune/tuner.h"' >"$tree/train/loop.cc"
expect 1 "library 'train' may use only" "train using tune"
rm "$tree/train/loop.cc"

echo '#include "core/x.h"' >"$tree/runtime/include/rayd/runtime/cluster.h"
expect 1 "public header includes only public headers" "a public header including a private one"
rm "$tree/runtime/include/rayd/runtime/cluster.h"

mkdir -p "$tree/train/src/torch" "$tree/tune/src"
echo '#include <torch/torch.h>' >"$tree/train/src/torch/ddp.cc"
echo '#include <rayd/train/session.h>' >>"$tree/train/src/torch/ddp.cc"
expect 0 "every include respects the layers" "LibTorch inside the torch half"
echo '#include <c10/util/Exception.h>' >"$tree/train/src/train_worker.cc"
expect 1 "train/src/train_worker.cc:1: <c10/util/Exception.h>" "LibTorch in the torch-free half"
rm "$tree/train/src/train_worker.cc"
echo '#include <rayd/train/ddp.h>' >"$tree/tune/src/tuner.cc"
expect 1 "only rayd_train_torch (train/src/torch/) includes LibTorch" "tune using the torch API"
rm "$tree/tune/src/tuner.cc"

expect 0 "every include respects the layers" "the clean tree again"
[ "$failures" -eq 0 ] && echo "check-layers: all cases as expected"
exit $((failures > 0))
