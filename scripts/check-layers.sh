#!/usr/bin/env bash
# Checks the include rules of ARCHITECTURE.md §2 and runtime/CMakeLists.txt: which library and
# which runtime role may include which. Prints each include that crosses a boundary the wrong
# way (file:line, the include, the rule) and exits 1 if there is any. Checks the tree at $1
# (default: this repository).
set -euo pipefail
cd "${1:-$(dirname "$0")/..}"

violations=0
report() {  # file:line, include, rule
  echo "$1: $2 — $3"
  violations=$((violations + 1))
}

# includes DIR... : prints "file:line<TAB>path" for every #include "..." in the sources
# (*.h, *.cc) under the directories that exist.
includes() {
  find "$@" -type f \( -name '*.h' -o -name '*.cc' \) -print0 2>/dev/null | sort -z |
    xargs -0 -r grep -Hn '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' |
    sed -E 's/^([^:]+:[0-9]+):[[:space:]]*#[[:space:]]*include[[:space:]]*"([^"]+)".*/\1\t\2/' || true
}

# 1. Runtime roles: runtime/src/<role>/ may include runtime/src/<dep>/ only for these deps.
declare -A may_use=(
  [common]="common"
  [core]="core common"
  [gcs]="gcs common"
  [node]="node common"
  [autoscaler]="autoscaler common"
  [head]="head gcs node autoscaler common"
  [api]="api core head common"
)
roles="common core gcs node autoscaler head api"
for role in $roles; do
  [ -d "runtime/src/$role" ] || continue
  while IFS=$'\t' read -r where path; do
    [ -n "$where" ] || continue
    target="${path%%/*}"
    [[ " $roles " == *" $target "* ]] || continue
    [[ " ${may_use[$role]} " == *" $target "* ]] ||
      report "$where" "\"$path\"" "runtime role '$role' may include only: ${may_use[$role]}"
  done < <(includes "runtime/src/$role")
done
for dir in runtime/src/*/; do
  role=$(basename "$dir")
  [[ " $roles " == *" $role "* ]] || [ "$role" = "dashboard" ] ||
    report "$dir" "" "a runtime/src directory that is no role: add it to runtime/CMakeLists.txt and here"
done

# 2. Public headers include public headers only.
while IFS=$'\t' read -r where path; do
  [ -n "$where" ] || continue
  [[ "$path" == rayd/* ]] ||
    report "$where" "\"$path\"" "a public header includes only public headers (rayd/...)"
done < <(includes base/include scheduler/include object_store/include runtime/include \
  data/include train/include tune/include)

# 3. Libraries above the runtime (and examples) reach it through its public headers only, and
#    add no runtime/src include directory.
while IFS=$'\t' read -r where path; do
  [ -n "$where" ] || continue
  first="${path%%/*}"
  [[ " $roles " == *" $first "* ]] &&
    report "$where" "\"$path\"" "outside runtime/, use public headers (runtime/include) only"
done < <(includes cli data train tune examples)
while IFS= read -r hit; do
  report "${hit%%:*}" "runtime/src" "outside runtime/ (and tests, benchmarks), no runtime/src include path"
done < <(grep -Hn 'runtime/src' cli/CMakeLists.txt train/CMakeLists.txt tune/CMakeLists.txt \
  examples/CMakeLists.txt 2>/dev/null | grep -v '^[^:]*:[0-9]*:[[:space:]]*#' || true)

# 4. Libraries: A may include B's public headers only where ARCHITECTURE.md §2 says A → B.
declare -A lib_may_use=(
  [base]="base protocol"
  [scheduler]="base protocol scheduler"
  [object_store]="base protocol object_store"
  [runtime]="base protocol scheduler object_store runtime api internal"
  [data]="base protocol scheduler object_store runtime api internal data"
  [train]="base protocol scheduler object_store runtime api internal data train"
  [tune]="base protocol scheduler object_store runtime api internal data train tune"
)
for lib in base scheduler object_store runtime data train tune; do
  while IFS=$'\t' read -r where path; do
    [ -n "$where" ] || continue
    [[ "$path" == rayd/* ]] || continue
    rest="${path#rayd/}"
    area="${rest%%/*}"
    [[ "$rest" == */* ]] || area="api"  # rayd/api.h
    [[ " ${lib_may_use[$lib]} " == *" $area "* ]] ||
      report "$where" "\"$path\"" "library '$lib' may use only: ${lib_may_use[$lib]}"
  done < <(includes "$lib")
done

# 5. LibTorch stays in rayd_train_torch (train/src/torch/ and the headers of its API), so that
#    rayd_train, rayd_tune and the CLI never load it: a rank process of a loop that only
#    reports starts without it (train/src/rank_session.h).
torch_api="rayd/train/torch_data.h rayd/train/batch_inference.h rayd/train/process_group.h rayd/train/ddp.h rayd/train/zero.h rayd/train/mixed_precision.h rayd/train/session.h rayd/train/fsdp.h rayd/train/tensor_parallel.h rayd/train/pipeline.h"
while IFS= read -r hit; do
  file="${hit%%:*}"
  case "$file" in
    train/src/torch/*) continue ;;
  esac
  header="${file#train/include/}"
  [[ " $torch_api " == *" $header "* ]] && continue
  path=$(sed -E 's/^[^:]+:[0-9]+:[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]([^>"]+)[>"].*/\1/' <<<"$hit")
  report "${hit%:*#*}" "<$path>" "only rayd_train_torch (train/src/torch/) includes LibTorch"
done < <(find data train tune cli -type f \( -name '*.h' -o -name '*.cc' \) -print0 2>/dev/null | sort -z |
  xargs -0 -r grep -Hn -E '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]((torch|c10|ATen)/|rayd/train/(torch_data|batch_inference|process_group|ddp|zero|mixed_precision|session|fsdp|tensor_parallel|pipeline)\.h)' || true)

if [ "$violations" -gt 0 ]; then
  echo "check-layers: $violations include(s) cross a boundary the wrong way"
  exit 1
fi
echo "check-layers: every include respects the layers"
