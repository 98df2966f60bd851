#!/usr/bin/env bash
# One preprocessing for a sweep ({cache: node}, docs/data.md), in one run: N = 1, 4 and 8 trials,
# a worker process each, each read an epoch of the same JPEG folder at once (decode, then
# random_crop to 56x56, each its own seed), as N separate pipelines and sharing the node's cache
# (after the decode; after the crop too); prints what a shared page costs this machine, the CPU
# seconds of all processes (and of the trials' own) and the wall time of each, the
# shared/separate CPU ratio against the target 1.2/N, and the load (build/bench/sharing_bench,
# bench/data/sharing_bench.cc). The images:
# Fashion-MNIST's first IMAGES training images as SIZE x SIZE grayscale JPEGs (64; cropped to 7/8).
#
#   bench/data/sharing.sh [IMAGES=10000] [TRIALS=1,4,8]
#   SIZE=224 bench/data/sharing.sh 3000      # ImageNet-sized images: a costlier decode
#   BURNERS=2 bench/data/sharing.sh          # the same beside two CPU burners
#   EPOCHS=4 bench/data/sharing.sh           # each trial reads 4 epochs (the cache makes one)
set -euo pipefail
cd "$(dirname "$0")/../.."
images="${1:-10000}" trials="${2:-1,4,8}" size="${SIZE:-64}"
bench="${SHARING_BIN:-build/bench/sharing_bench}"
[ -n "${SHARING_BIN:-}" ] || bench/build.sh sharing_bench
source bench/data/common.sh
bench_work rayd-bench-sharing
/usr/bin/python3 bench/data/make_image_folder.py "$work/images" "$images" "$size" 2>/dev/null
start_burners
crop=$((size * 7 / 8))
echo "== ${#burners[@]} CPU burners beside; $images JPEGs ${size}x$size -> random_crop ${crop}x$crop, batch 64, ${EPOCHS:-1} epoch(s)"
"$bench" "$work/images" "$trials" "${EPOCHS:-1}" 64 "$crop"
