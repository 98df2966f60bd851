#!/usr/bin/env bash
# Time to the first batch in a rank (issue 49's target: <= 2 s; Ray Data measured 24.6 s on
# ImageNet, PyTorch's DataLoader 9.6 s), in one run:
#   rayd: build/bench/first_batch (bench/data/first_batch.cc): from Trainer::Fit to the first
#         batch in the slower of 2 ranks, for a C++ loop and a Python command trial, on
#         Fashion-MNIST's gzipped IDX files and on a folder of 64x64 JPEGs (random_crop to 56x56),
#         on an embedded cluster already started (its start is printed apart, and so is the
#         process's start to its first batch);
#   PyTorch: bench/data/first_batch_torch.py: from the script's process start to the first batch
#         in the slower of 2 DDP ranks (forked, each forming its Gloo group, then the dataset and a
#         DataLoader of LOADER_WORKERS workers), on the same images and on the un-gzipped IDX files
#         (torchvision's layout, un-gzipped beforehand and not timed).
# Each case runs REPEATS times; prints the median and the first, and the load.
#
#   bench/data/first_batch.sh [REPEATS=3] [IMAGES=10000]
#   BURNERS=2 bench/data/first_batch.sh       # the same beside two CPU burners
set -euo pipefail
cd "$(dirname "$0")/../.."
repeats="${1:-3}" images="${2:-10000}"
bench="${FIRST_BATCH_BIN:-build/bench/first_batch}"
[ -n "${FIRST_BATCH_BIN:-}" ] || bench/build.sh first_batch
here="$(pwd)/bench/data"
source bench/data/common.sh
bench_work rayd-bench-first-batch
/usr/bin/python3 "$here/make_image_folder.py" "$work/images" "$images" 64 2>/dev/null
mkdir -p "$work/tv/FashionMNIST/raw"
for f in /usr/share/datasets/fashion-mnist/*.gz; do
  gzip -dc "$f" >"$work/tv/FashionMNIST/raw/$(basename "${f%.gz}")"
done
start_burners

echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg); burners: ${BURNERS:-0}"
RAYD_TEMP_DIR="$work/tmp" "$bench" "$repeats" "$work/images" | tee "$work/rayd.out" | grep -v '^RESULT'
for mode in idx images; do
  root="$work/tv"
  [[ "$mode" == images ]] && root="$work/images"
  for _ in $(seq 1 "$repeats"); do
    OMP_NUM_THREADS=1 /usr/bin/python3 "$here/first_batch_torch.py" "$mode" "$root" \
      "${LOADER_WORKERS:-1}" >>"$work/torch-$mode.out" 2>"$work/torch.err" ||
      { cat "$work/torch.err"; exit 1; }
  done
done
/usr/bin/python3 - "$work/torch-idx.out" "$work/torch-images.out" <<'PY'
import json, statistics, sys
for path, name in zip(sys.argv[1:], ("Fashion-MNIST idx", "JPEG folder + RandomCrop")):
    runs = [json.loads(l) for l in open(path) if l.strip()]
    each = [r["first_batch_s"] for r in runs]
    # Rank 0's own part: from its start (forked) to its first batch.
    rank = [r["ranks_s"][0] - r["rank0_stages_s"]["rank_start"] for r in runs]
    label = f"PyTorch DataLoader (w={runs[0]['workers']}), {name}"
    print(f"{label:52} process start -> first batch: median {statistics.median(each):.2f} s, "
          f"first {each[0]:.2f} s ({', '.join(f'{t:.2f}' for t in each)}); "
          f"rank 0's start -> its first batch {statistics.median(rank):.2f} s")
PY
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
