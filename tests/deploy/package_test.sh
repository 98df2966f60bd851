#!/usr/bin/env bash
# The Debian package, as an operator gets it: `cpack -G DEB` in the build directory (what
# scripts/package.sh runs) makes rayd_<version>_amd64.deb, and then
#   1. `dpkg-deb -I`: its name, version, architecture, and Depends: naming the Debian runtime
#      packages rayd links (LibTorch, Cap'n Proto, libuv, hiredis, yaml-cpp, protobuf, OpenSSL);
#   2. `dpkg-deb -c`: the binary, libraries, tune plugin, example trainables, headers, CMake
#      package files, Python client and systemd units, all under /usr;
#   3. unpacked into a scratch root (`dpkg-deb -x`; nothing of the build tree on the way):
#      `rayd --version` runs, a sweep runs with that root's `rayd` (its plugin and trainables
#      found beside it), and examples/embedded_service builds with find_package(rayd) from the
#      root and runs.
#
#   tests/deploy/package_test.sh BUILD_DIR SOURCE_DIR
# Exits 77 (CTest: skipped) without dpkg-deb or dpkg-shlibdeps.
set -uo pipefail
build="${1:?usage: package_test.sh BUILD_DIR SOURCE_DIR}"
source_dir="${2:?}"

skip() { echo "skipped: $*"; exit 77; }
for bin in cpack dpkg-deb dpkg-shlibdeps; do
  command -v "$bin" >/dev/null || skip "$bin not found (scripts/install-deps.sh installs dpkg-dev)"
done

work="$(mktemp -d /tmp/rayd-package.XXXXXX)"
cleanup() { rm -rf "$work"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

# A package directory of the test's own, so that a concurrent scripts/package.sh is untouched.
echo "==> cpack -G DEB"
cpack --config "$build/CPackConfig.cmake" -B "$work/package" >"$work/cpack.log" 2>&1 ||
  { cat "$work/cpack.log"; fail "cpack failed"; }
debs=("$work"/package/rayd_*_amd64.deb)
[ -f "${debs[0]}" ] || { cat "$work/cpack.log"; fail "no rayd_*_amd64.deb in $work/package"; }
deb="${debs[0]}"
echo "$(basename "$deb"): $(du -h "$deb" | cut -f1)"

echo "==> dpkg-deb -I"
dpkg-deb -I "$deb" | tee "$work/info"
grep -q "^ Package: rayd$" "$work/info" || fail "Package: is not rayd"
grep -q "^ Architecture: amd64$" "$work/info" || fail "Architecture: is not amd64"
depends="$(grep "^ Depends:" "$work/info")"
for lib in libtorch1.13 libcapnp-0.9.2 libuv1 libhiredis0.14 libyaml-cpp0.7 libprotobuf32 \
    libssl3 libopenblas0-pthread libstdc++6; do
  [[ "$depends" == *"$lib"* ]] || fail "Depends: does not name $lib"
done

echo "==> dpkg-deb -c"
dpkg-deb -c "$deb" | awk '{print $NF}' | sed 's|^\./|/|' >"$work/files"
for f in /usr/bin/rayd /usr/lib/librayd_runtime.so /usr/lib/librayd_train.so \
    /usr/lib/librayd_tune.so /usr/lib/rayd/librayd_cli_tune.so \
    /usr/lib/rayd/libexample_loops.so /usr/lib/rayd/libexample_trainables.so /usr/include/rayd/api.h \
    /usr/lib/cmake/rayd/raydConfig.cmake /usr/lib/cmake/rayd/raydTargets.cmake \
    /usr/share/rayd/python/rayd/train.py /usr/lib/systemd/system/rayd-head.service \
    /usr/lib/systemd/system/rayd-node.service /usr/lib/sysusers.d/rayd.conf \
    /usr/share/rayd/systemd/rayd.env; do
  grep -qx "$f" "$work/files" || fail "the package has no $f"
done
if grep -v '^/usr' "$work/files" | grep -v '^/$' | grep -q .; then
  fail "files outside /usr: $(grep -v '^/usr' "$work/files" | grep -v '^/$' | head -5)"
fi

echo "==> unpacked into a scratch root"
root="$work/root"
dpkg-deb -x "$deb" "$root" || fail "dpkg-deb -x"
grep -q "ExecStart=/usr/bin/rayd" "$root/usr/lib/systemd/system/rayd-head.service" ||
  fail "rayd-head.service does not run /usr/bin/rayd"
version="$(env -u LD_LIBRARY_PATH "$root/usr/bin/rayd" --version)" || fail "rayd --version"
echo "$version"
[[ "$version" =~ ^rayd\ [0-9]+\.[0-9]+\.[0-9]+\ \(commit\ [0-9a-f]{7,}(-dirty)?\)$ ]] ||
  [[ "$version" =~ \(commit\ unknown\)$ ]] || fail "rayd --version printed '$version'"

# A small sweep of the example trainables with the unpacked rayd: its plugin, libraries and
# trainables must all come from the root.
mkdir -p "$work/sweep" "$work/tmp"
cat >"$work/sweep/tune.yaml" <<'EOF'
name: packaged
trainable: toy_objective
param_space: {x: {grid_search: [1, 2]}, iterations: 3}
tune: {metric: loss, mode: min, num_samples: 1}
run: {storage_path: ./results}
EOF
(cd "$work/sweep" && env -u LD_LIBRARY_PATH -u RAYD_ADDRESS RAYD_TEMP_DIR="$work/tmp" \
  timeout 300 "$root/usr/bin/rayd" tune tune.yaml) >"$work/tune.log" 2>&1 ||
  { cat "$work/tune.log"; fail "rayd tune from the package"; }
grep -q "^2 trials: 2 terminated, 0 errors" "$work/tune.log" ||
  { cat "$work/tune.log"; fail "the packaged sweep did not finish both trials"; }

# find_package(rayd) from the root's /usr, and the program runs.
cmake -S "$source_dir/examples/embedded_service" -B "$work/app" -G Ninja \
  -DCMAKE_PREFIX_PATH="$root/usr" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF \
  >"$work/app.log" 2>&1 || { cat "$work/app.log"; fail "configuring against the package"; }
grep -q "^rayd_DIR:PATH=$root/usr/lib/cmake/rayd$" "$work/app/CMakeCache.txt" ||
  fail "rayd was not found in the package's root: $(grep ^rayd_DIR "$work/app/CMakeCache.txt")"
cmake --build "$work/app" -j 2 >>"$work/app.log" 2>&1 ||
  { cat "$work/app.log"; fail "building against the package"; }
(env -u RAYD_ADDRESS RAYD_TEMP_DIR="$work/tmp" timeout 120 "$work/app/embedded_service") \
  >"$work/run.log" 2>&1 || { cat "$work/run.log"; fail "embedded_service against the package"; }
grep -q "embedded_service: all checks passed" "$work/run.log" || fail "embedded_service"
echo "package: all checks passed"
