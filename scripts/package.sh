#!/usr/bin/env bash
# Builds the Debian package: installs what building needs, builds what the package holds
# (scripts/build.sh --main), and writes build/package/rayd_<version>_amd64.deb (cpack -G DEB).
# Install it on any Debian 12 machine with `apt install ./rayd_<version>_amd64.deb`.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${RAYD_BUILD_DIR:-build}"
./scripts/install-deps.sh --main
./scripts/build.sh --main "$@"
(cd "$build_dir" && cpack -G DEB)
ls -l "$build_dir"/package/rayd_*.deb
