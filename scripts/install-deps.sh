#!/usr/bin/env bash
# Installs the Debian 12 packages rayd builds, tests and runs with. Only what is missing is
# installed; run as root (or with sudo available).
#
#   scripts/install-deps.sh           what rayd needs
#   scripts/install-deps.sh --peers   also the peers bench/peers/ and bench/search/ compare
#                                     with (Optuna, Dask distributed) and matplotlib for the plot of
#                                     bench/scale/
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  capnproto libcapnp-dev libuv1-dev libhiredis-dev redis-server
  libyaml-cpp-dev catch2 libcli11-dev libspdlog-dev nlohmann-json3-dev libmsgpack-cxx-dev
  libssl-dev libtorch-dev libopenblas0-pthread libgloo-dev
  clang libclang-rt-14-dev
  iproute2 redis-tools
  shellcheck python3-yaml systemd
  chromium
  # Python command trainables: the example DDP script and its tests (tests/e2e/command_test.cc)
  # run on Debian's /usr/bin/python3 with PyTorch.
  python3-torch
  # promtool checks that the head's and the nodes' /metrics are what Prometheus expects
  # (tests/e2e/metrics_test.cc).
  prometheus
  # TensorBoard event files per trial (tune/proto/).
  libprotobuf-dev protobuf-compiler
  # A real Slurm for deploy/slurm/rayd.sbatch's test (tests/deploy/slurm_test.sh).
  slurm-wlm munge
)
# Node.js and npm drive the dashboard's browser test (tests/e2e/dashboard). A machine that has
# them from elsewhere (NodeSource's nodejs bundles npm) keeps them: Debian's npm package would
# conflict with it.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  packages+=(nodejs npm)
fi
if [ "${1:-}" = "--peers" ]; then
  packages+=(python3-optuna python3-distributed python3-matplotlib)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages are installed"
  exit 0
fi

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "install-deps: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
