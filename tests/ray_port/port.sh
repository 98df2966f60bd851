#!/usr/bin/env bash
# Produces ported/ from ray-src/ (a pristine copy of Ray's files, see SOURCES.md):
#   1. the mechanical renames of docs/ray-compat.md (one sed script, every file alike);
#   2. the few edits a rename cannot do, each listed in PORTING.md, each checked to apply
#      (a port that silently stops matching Ray's text is an error here, not a surprise later).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
SRC="$HERE/ray-src"
OUT="$HERE/ported"
rm -rf "$OUT"
mkdir -p "$OUT"

# ---- 1. mechanical renames --------------------------------------------------------------
# Order matters only where one name contains another: the exception names (ray::internal::X
# -> rayd::Y) go before the general ray:: -> rayd::.
RENAMES=(
  -e 's#ray::internal::RayException\b#rayd::RaydError#g'
  -e 's#ray::internal::RayTaskException\b#rayd::RemoteError#g'
  -e 's#ray::internal::RayActorException\b#rayd::ActorDiedError#g'
  -e 's#ray::internal::UnreconstructableException\b#rayd::ObjectLostError#g'
  -e 's#ray::internal::RayRuntimeEnvException\b#rayd::RuntimeEnvError#g'
  -e 's#<ray/#<rayd/#g'
  -e 's#"ray/util/logging\.h"#"rayd/util/logging.h"#g'
  -e 's#"boost/filesystem\.hpp"#<filesystem>#g'
  -e 's#\bboost::filesystem::#std::filesystem::#g'
  -e 's#\bboost::optional\b#std::optional#g'
  -e 's#\bRayConfig\b#RaydConfig#g'
  -e 's#RayLog#RaydLog#g'
  -e 's#\bRAYLOG\b#RAYDLOG#g'
  -e 's#\bRAY_#RAYD_#g'
  -e 's#\bray::#rayd::#g'
)
for f in "$SRC"/*; do
  sed -E "${RENAMES[@]}" "$f" > "$OUT/$(basename "$f")"
done

# ---- 2. edits a rename cannot do (PORTING.md lists each, with the reason) -----------------
# edit FILE SED-SCRIPT: apply it and fail when it changed nothing.
edit() {
  local file="$OUT/$1" script="$2" before
  before="$(md5sum < "$file")"
  sed -E -i "$script" "$file"
  if [[ "$(md5sum < "$file")" == "$before" ]]; then
    echo "port.sh: edit did not apply to $1: $script" >&2
    exit 1
  fi
}

# E1 cluster_mode_test.cc: Ray-internal and absl includes. NativeObjectStore and ObjectID
#    come from <rayd/api.h>; Ray's runtime and process helper have no counterpart.
edit cluster_mode_test.cc '\#^\#include "\.\./\.\./(runtime|util)/.*"$#d'
edit cluster_mode_test.cc '\#^\#include "absl/flags/(flag|parse)\.h"$#d'
# E2 cluster_mode_test.cc: the three ABSL_FLAGs (external Ray cluster started through
#    Ray's ProcessHelper with a Redis password) and their uses.
edit cluster_mode_test.cc '/^ABSL_FLAG\(/d'
edit cluster_mode_test.cc '/^  if \(absl::GetFlag<bool>\(FLAGS_external_cluster\)\) \{$/,/^  \}$/d'
edit cluster_mode_test.cc '/^  absl::ParseCommandLine\(argc, argv\);$/d'
# E3 counter.cc: Counter::EchoAnyArray (std::vector<std::any>, Ray's cross-language values)
#    is not registered: msgpack cannot carry std::any.
edit counter.cc 's#^(           &Counter::EchoStrings),$#\1);#'
edit counter.cc '/^           &Counter::EchoAnyArray\);$/d'
# E4 metric_example.cc: its one absl flag (--metric_time, default 10) becomes the default.
edit metric_example.cc '\#^\#include "absl/flags/(flag|parse)\.h"$#d'
edit metric_example.cc '/^ABSL_FLAG\(int32_t, metric_time/d'
edit metric_example.cc '/^  absl::ParseCommandLine\(argc, argv\);$/d'
edit metric_example.cc 's#absl::GetFlag\(FLAGS_metric_time\)#10 /* Ray: --metric_time, default 10 */#'
# E5 api_test.cc: "boost/filesystem.hpp" also brought in <fstream> (through
#    boost/filesystem/fstream.hpp), which LogTest's std::ifstream needs; <filesystem> does not.
edit api_test.cc 's#^\#include <filesystem>$#&\n\#include <fstream>#'

# Nothing of Ray's internals may survive the port.
if grep -nE '\bray::|absl|boost|\.\./\.\./' "$OUT"/*; then
  echo "port.sh: Ray-internal names left in ported/" >&2
  exit 1
fi
echo "port.sh: ported $(ls "$OUT" | wc -l) files into $OUT"
