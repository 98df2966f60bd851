#!/usr/bin/env bash
# Re-runs Ray's C++ API tests against rayd, from scratch:
#   1. installs rayd from the build folder (RAYD_BUILD, default: this checkout's build/) into RAYD_PREFIX (/tmp/rayd-prefix);
#   2. ports ray-src/ into ported/ (port.sh);
#   3. builds against the installed rayd, -j1; a TEST that does not compile is taken out
#      and counted as failed (build.py);
#   4. runs every TEST alone and each binary once whole, and the 4 examples, each under a
#      timeout (RAYTESTS_TIMEOUT, 300 s), and prints the table (run_tests.py).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
RAYD_BUILD="${RAYD_BUILD:-$(cd "$HERE/../.." && pwd)/build}"
export RAYD_PREFIX="${RAYD_PREFIX:-/tmp/rayd-prefix}"
cd "$HERE"
echo "== install rayd from $RAYD_BUILD into $RAYD_PREFIX" >&2
rm -rf "$RAYD_PREFIX"
cmake --install "$RAYD_BUILD" --prefix "$RAYD_PREFIX" > "$HERE/install.log" 2>&1 \
  || { tail -20 "$HERE/install.log" >&2; exit 1; }
# cmake --install copies headers from the source tree as they are now, libraries as last built:
# a header edited after the last build gives a mismatched pair (link errors, crashes). Say so.
newest_header="$(find "$RAYD_PREFIX/include" -type f -printf '%T@ %p\n' | sort -n | tail -1)"
runtime_lib="$(stat -c %Y "$RAYD_PREFIX/lib/librayd_runtime.so")"
if [[ "${newest_header%%.*}" -gt "$runtime_lib" ]]; then
  echo "WARNING: rayd header ${newest_header#* } is newer than librayd_runtime.so" \
       "($(date -d @"$runtime_lib" +%T)): $RAYD_BUILD is not current; results may be wrong" \
    | tee "$HERE/stale.txt" >&2
else
  rm -f "$HERE/stale.txt"
fi
echo "== port" >&2
./port.sh >&2
echo "== build (-j1)" >&2
python3 build.py
echo "== run" >&2
rm -rf "$HERE/logs" "$HERE/rayd-tmp" "$HERE/work"
{ python3 run_tests.py; cat "$HERE/stale.txt" 2>/dev/null || true; } | tee "$HERE/results.txt"
