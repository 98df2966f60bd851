#!/usr/bin/env bash
# The README's first command: installs what is missing, builds, and runs the main job: the
# examples/tune.yaml sweep (ASHA over the example MLP classifier, each trial a 2-worker Gloo
# Trainer in its own placement group) on an embedded local cluster. Results land in
# ./rayd_results/mlp-asha/ (an earlier run of the same sweep is replaced).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh
rayd="${RAYD_BUILD_DIR:-build}/cli/rayd"
export RAYD_TEMP_DIR="${RAYD_TEMP_DIR:-$(mktemp -d /tmp/rayd-quickstart-XXXXXX)}"
"$rayd" tune examples/tune.yaml --overwrite
