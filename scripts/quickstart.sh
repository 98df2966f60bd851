#!/usr/bin/env bash
# The README's first command: installs what is missing, builds, and runs the main job on a
# local cluster started for it.
#
# The tune.yaml sweep (`rayd tune examples/tune.yaml`) is the main job once the Tuner lands
# (issue [6/9]); until then this starts a head and a node, shows the cluster, runs the C++ API
# example on it, and stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh
rayd="${RAYD_BUILD_DIR:-build}/cli/rayd"
export RAYD_TEMP_DIR="${RAYD_TEMP_DIR:-$(mktemp -d /tmp/rayd-quickstart-XXXXXX)}"
trap '"$rayd" stop >/dev/null' EXIT
port=$((20000 + RANDOM % 20000))
"$rayd" start --head --port "$port" --num-cpus 4 --num-gpus 2 --resources '{"tpu": 1}'
"$rayd" start --address "127.0.0.1:$port" --num-cpus 2
"$rayd" status
RAYD_ADDRESS="127.0.0.1:$port" "${RAYD_BUILD_DIR:-build}/examples/quickstart"
