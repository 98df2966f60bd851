#!/usr/bin/env bash
# The Debian development packages a build on the GPU machine needs, which reaches no package
# registry: `fetch` downloads them here into the git-ignored .deps/debs (carry `.deps` to the
# device), `unpack` (on the GPU machine) unpacks them into .deps/root and prints the exports
# that point CMake, the compiler and the loader there and at PyTorch's CUDA LibTorch.
#
#   scripts/gpu-deps.sh fetch
#   eval "$(scripts/gpu-deps.sh unpack)"      # on the GPU machine, from the project root
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  fetch)
    mkdir -p .deps/debs
    grep -qx '/.deps/' .git/info/exclude 2>/dev/null || echo '/.deps/' >> .git/info/exclude
    (cd .deps/debs && apt-get download libcapnp-dev libcapnp-0.9.2 capnproto libuv1-dev libuv1 \
      libhiredis-dev libhiredis0.14 libyaml-cpp-dev libyaml-cpp0.7 catch2 \
      libspdlog-dev libspdlog1.10 libfmt-dev libfmt9 libcli11-dev nlohmann-json3-dev \
      libmsgpack-cxx-dev redis-server redis-tools libjemalloc2 liblzf1 libssl-dev \
      libprotobuf-dev libprotobuf32 libprotobuf-lite32 protobuf-compiler libprotoc32)
    ls -1 .deps/debs | wc -l
    ;;
  unpack)
    root="$PWD/.deps/root"
    mkdir -p "$root"
    for f in .deps/debs/*.deb; do dpkg -x "$f" "$root"; done
    torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
    cat <<EOT
export PATH="$root/usr/bin:\$PATH"
export CMAKE_PREFIX_PATH="$root/usr:$root/usr/lib/x86_64-linux-gnu/cmake:$torch_prefix"
export CPATH="$root/usr/include\${CPATH:+:\$CPATH}"
export LIBRARY_PATH="$root/usr/lib/x86_64-linux-gnu\${LIBRARY_PATH:+:\$LIBRARY_PATH}"
export LD_LIBRARY_PATH="$root/usr/lib/x86_64-linux-gnu\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export PKG_CONFIG_PATH="$root/usr/lib/x86_64-linux-gnu/pkgconfig:$root/usr/share/pkgconfig\${PKG_CONFIG_PATH:+:\$PKG_CONFIG_PATH}"
EOT
    ;;
  *)
    echo "usage: scripts/gpu-deps.sh fetch|unpack" >&2
    exit 2
    ;;
esac
