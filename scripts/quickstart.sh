#!/usr/bin/env bash
# The README's first command: installs what the main job needs (not the test suite's tools),
# builds what it runs (the `rayd` binary, its tune plugin, the example trainables and the tour's
# quickstart program; no tests), and runs the main job: the examples/tune.yaml sweep (ASHA over
# a small CNN on Fashion-MNIST read through rayd Data, each trial a 2-worker Gloo Trainer in its
# own placement group) on an embedded local cluster. Results land in
# ./rayd_results/fashion-asha/ (an earlier run of the same sweep is replaced). Each phase's time is printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
./scripts/install-deps.sh --main
installed=$SECONDS
./scripts/build.sh --main
built=$SECONDS
rayd="${RAYD_BUILD_DIR:-build}/cli/rayd"
export RAYD_TEMP_DIR="${RAYD_TEMP_DIR:-$(mktemp -d /tmp/rayd-quickstart-XXXXXX)}"
"$rayd" tune examples/tune.yaml --overwrite
echo "quickstart: install $((installed - start)) s, build $((built - installed)) s," \
     "sweep $((SECONDS - built)) s"
