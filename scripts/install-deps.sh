#!/usr/bin/env bash
# Installs the Debian 12 packages rayd builds, tests and runs with. Only what is missing is
# installed; run as root (or with sudo available).
#
#   scripts/install-deps.sh           everything: building rayd and running every test
#   scripts/install-deps.sh --main    only what building rayd and running the main job needs
#                                     (scripts/quickstart.sh): no test tools, browsers or Slurm
#   scripts/install-deps.sh --peers   everything, and the peers bench/peers/ and bench/search/
#                                     compare with (Optuna, Dask distributed) and matplotlib for
#                                     the plot of bench/scale/
set -euo pipefail

# What the build and the main job need: the compiler, the libraries rayd links (LibTorch with
# the OpenBLAS it only recommends, without which training is ~12x slower), TensorBoard's
# protobuf. A rayd package (scripts/package.sh) depends on the runtime halves of these.
main_packages=(
  build-essential cmake ninja-build pkg-config
  capnproto libcapnp-dev libuv1-dev libhiredis-dev
  libyaml-cpp-dev libcli11-dev libspdlog-dev nlohmann-json3-dev libmsgpack-cxx-dev
  libssl-dev libtorch-dev libopenblas0-pthread libgloo-dev
  libprotobuf-dev protobuf-compiler
  # rayd Data: gzip (IDX, .npz), and the main job's dataset: Fashion-MNIST's real images
  # (/usr/share/datasets/fashion-mnist/).
  zlib1g-dev dataset-fashion-mnist
)
# What the tests add.
test_packages=(
  catch2 redis-server redis-tools iproute2
  # The fuzz targets (scripts/fuzz.sh) build with clang's libFuzzer.
  clang libclang-rt-14-dev
  # deploy/check.sh: shell scripts, manifests and systemd units; the package test reads the .deb.
  shellcheck python3-yaml systemd dpkg-dev
  # The dashboard's browser test (tests/e2e/dashboard) drives Chromium.
  chromium
  # Python command trainables: the example DDP script and its tests (tests/e2e/command_test.cc)
  # run on Debian's /usr/bin/python3 with PyTorch.
  python3-torch
  # The Horovod tests' runtime (tests/e2e/horovod_test.cc): a build of Horovod from ../shared/horovod
  # imports these (psutil too: `import horovod.torch` loads its elastic runner).
  python3-cloudpickle python3-packaging python3-psutil
  # promtool checks that the head's and the nodes' /metrics are what Prometheus expects
  # (tests/e2e/metrics_test.cc).
  prometheus
  # A real Slurm for deploy/slurm/rayd.sbatch's test (tests/deploy/slurm_test.sh).
  slurm-wlm munge
  # rayd Data's optional formats, built when found (the main job reads IDX only, so the quick
  # start leaves them out): images (data/cmake/images.cmake: JPEG through TurboJPEG, and PNG)
  # and HDF5 (data/cmake/hdf5.cmake).
  libturbojpeg0-dev libpng-dev libhdf5-dev
  # rayd Data's tests write their files with the reference tools: NumPy, PIL, h5py
  # (tests/unit/data/*.py).
  python3-numpy python3-pil python3-h5py
  # `format: parquet` in the tests: the Apache Arrow build in ../shared/arrow/ (Debian has none)
  # links against these (and zlib1g-dev, above) and needs Thrift to run
  # (data/cmake/parquet.cmake).
  libsnappy-dev libbrotli-dev liblz4-dev libzstd-dev libthrift-0.17.0
)

packages=("${main_packages[@]}")
case "${1:-}" in
  --main) ;;
  "" | --peers)
    packages+=("${test_packages[@]}")
    # Node.js and npm drive the dashboard's browser test. A machine that has them from
    # elsewhere (NodeSource's nodejs bundles npm) keeps them: Debian's npm would conflict.
    if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
      packages+=(nodejs npm)
    fi
    if [ "${1:-}" = "--peers" ]; then
      # torchvision: bench/data/fashion_ingest.sh's DataLoader peer.
      packages+=(python3-optuna python3-distributed python3-matplotlib python3-torchvision)
    fi
    ;;
  *)
    echo "install-deps: unknown argument '$1' (use --main, --peers or nothing)" >&2
    exit 2
    ;;
esac

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
# dpkg's fsync after every file is most of an install's time here (LibTorch pulls ~190
# packages); a machine that loses power mid-install reruns this script anyway.
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
  -o Dpkg::Options::=--force-unsafe-io "${missing[@]}"
