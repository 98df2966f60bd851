#!/usr/bin/env bash
# A JPEG decode + random-crop pipeline into 2 data-parallel ranks (RANKS), in one run: the same network
# (bench/data/jpeg_common.py), batch and images on three sides, each timed in images/s:
#   rayd Data:  a Python command trial under `rayd train` (bench/data/jpeg_rayd_trial.py) reading
#               `format: images`; rayd's C++ preprocessing in each rank's actor decodes the JPEGs
#               (libjpeg-turbo) and crops them (`random_crop`); the loop scales the uint8
#               batch to float32 (RAYD_TO_FLOAT=1: rayd's to_float32 transform does, 4x the
#               bytes through shared memory: a rank's bare pass ran ~20% slower so);
#   DataLoader: torchvision's ImageFolder (PIL) + RandomCrop + ToTensor through PyTorch's
#               DataLoader, LOADER_WORKERS worker processes per rank (bench/data/jpeg_torch_ddp.py);
#   mock:       one pre-made batch every step, as many steps as an epoch has (Ray's ingest
#               benchmarks' upper bound), under each harness: rayd's (the same command trial,
#               no dataset) and the DataLoader's (mp.spawn).
# The images: Fashion-MNIST's first IMAGES training images as an ImageFolder tree of 64x64
# grayscale JPEGs (bench/data/make_image_folder.py), cropped to 56x56. Prints each side's
# images/s (median of epochs 2.. over ROUNDS rounds, default 2, in alternating order), rank 0's
# time waiting for data, the CPU each whole run took per image (all its processes, start-up
# included: others' load moves it much less than images/s), the ratios, and the load.
#
#   bench/data/jpeg_pipeline.sh [EPOCHS=3] [BATCH=64] [IMAGES=10000]
#   BURNERS=2 bench/data/jpeg_pipeline.sh     # the same beside two CPU burners
#   LOADER_WORKERS=2 ...                       # DataLoader num_workers per rank (default 1)
#   RANKS=1 ...                                # one rank: a core left for the preprocessing
set -euo pipefail
cd "$(dirname "$0")/../.."
epochs="${1:-3}" batch="${2:-64}" images="${3:-10000}" ranks="${RANKS:-2}"
export RANKS="$ranks"
channels=8 hidden=64 side=56
rayd="${RAYD_BIN:-build/cli/rayd}"
here="$(pwd)/bench/data"
source bench/data/common.sh
bench_work rayd-bench-jpeg
/usr/bin/python3 "$here/make_image_folder.py" "$work/images" "$images" 64 2>/dev/null
start_burners

cat >"$work/train.yaml" <<YAML
name: jpeg
trainable:
  command: [/usr/bin/python3, $here/jpeg_rayd_trial.py]
  launcher: torch
config: {batch_size: $batch, channels: $channels, hidden: $hidden, epochs: $epochs, side: $side}
scaling: {num_workers: $ranks, resources_per_worker: {CPU: 1}}
datasets:
  train:
    format: images
    paths: [$work/images]
    mode: L
    transforms:
      - {map_batches: random_crop, size: [$side, $side], seed: 0}
$([[ "${RAYD_TO_FLOAT:-0}" != 1 ]] ||
  echo "      - {map_batches: to_float32, columns: [image], scale: 0.00392156862745098}")
      - {map_batches: select_columns, columns: [image, label]}
run: {storage_path: $work/results}
YAML
# The mock under rayd's harness: the same trial, ranks and dataset, one batch repeated.
steps=$(((images / ranks + batch - 1) / batch))
sed -e "s/^config: {/config: {mock_steps: $steps, /" "$work/train.yaml" >"$work/mock.yaml"

# Runs a command and appends the CPU seconds (user + system) it and its descendants took to $1:
# a figure that others' load on the machine moves much less than images/s.
cpu_run() {
  /usr/bin/python3 -c 'import resource, subprocess, sys
rc = subprocess.call(sys.argv[2:])
u = resource.getrusage(resource.RUSAGE_CHILDREN)
open(sys.argv[1], "a").write(f"{u.ru_utime + u.ru_stime}\n")
sys.exit(rc)' "$@"
}

# One side's epochs, appended to $work/SIDE.jsonl, and its CPU seconds to $work/SIDE.cpu.
run_side() {
  local side_name="$1" round="$2"
  case "$side_name" in
    rayd | rayd_mock)
      local yaml=train
      [[ "$side_name" == rayd_mock ]] && yaml=mock
      sed -e "s/^name: jpeg$/name: $side_name$round/" "$work/$yaml.yaml" >"$work/run.yaml"
      RAYD_TEMP_DIR="$work/tmp" cpu_run "$work/$side_name.cpu" "$rayd" train "$work/run.yaml" \
        >"$work/rayd.out" 2>&1 ||
        { cat "$work/rayd.out"; exit 1; }
      cat "$work/results/$side_name$round/result.json" >>"$work/$side_name.jsonl"
      ;;
    imagefolder | mock)
      # OMP_NUM_THREADS=1 as torchrun sets it for several ranks a node (and rayd for a rank of 1 CPU).
      OMP_NUM_THREADS=1 cpu_run "$work/$side_name.cpu" /usr/bin/python3 "$here/jpeg_torch_ddp.py" \
        "$side_name" "$work/images" "$epochs" "$batch" "$channels" "$hidden" "$side" \
        "${LOADER_WORKERS:-1}" >"$work/torch.out" 2>"$work/torch.err" ||
        { cat "$work/torch.err"; exit 1; }
      cat "$work/torch.out" >>"$work/$side_name.jsonl"
      ;;
  esac
}

echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg); burners: ${BURNERS:-0}; ranks: $ranks"
# Rounds alternate the order (forward, then backward), so that load that comes and goes weighs
# on every side alike.
sides=(rayd rayd_mock imagefolder mock)
for round in $(seq 1 "${ROUNDS:-2}"); do
  order=("${sides[@]}")
  ((round % 2 == 0)) && order=(mock imagefolder rayd_mock rayd)
  for s in "${order[@]}"; do run_side "$s" "$round"; done
done

/usr/bin/python3 - "$work/rayd.jsonl" "$work/rayd_mock.jsonl" "$work/imagefolder.jsonl" \
  "$work/mock.jsonl" "${LOADER_WORKERS:-1}" "$((epochs * images))" "$epochs" <<'PY'
import json, statistics, sys
def rows(path):
    out = [json.loads(l) for l in open(path) if l.strip()]
    # Each run's first epoch starts workers and warms caches: the later ones count.
    return [r for r in out if r["epoch"] > 0] or out
def cpu(path):  # CPU ms per image of a whole run (start-up and every epoch), median of rounds
    return statistics.median(float(l) for l in open(path.replace(".jsonl", ".cpu"))) * 1e3 / int(sys.argv[6])
rayd, rayd_mock, folder, mock = (rows(p) for p in sys.argv[1:5])
med = lambda rs, k: statistics.median(r[k] for r in rs)
print(f"{'':44} {'images/s':>9} {'wait/epoch':>11} {'wait share':>10} {'CPU ms/image':>12}")
for name, rs, path in (("rayd Data: images + random_crop (rayd train)", rayd, sys.argv[1]),
                       ("mock loader (rayd train)", rayd_mock, sys.argv[2]),
                       (f"ImageFolder + DataLoader, w={sys.argv[5]} (mp.spawn)", folder, sys.argv[3]),
                       ("mock loader (mp.spawn)", mock, sys.argv[4])):
    print(f"{name:44} {med(rs, 'samples_per_s'):9.0f} {med(rs, 'loop_wait_s'):10.3f}s "
          f"{med(rs, 'loop_wait_s') / med(rs, 'train_s'):10.2%} {cpu(path):12.2f}")
print(f"rayd's data_wait_s (its data server waiting for blocks not made yet): "
      f"{med(rayd, 'data_wait_s'):.3f} s/epoch")
r, rm, f, m = (med(rs, "samples_per_s") for rs in (rayd, rayd_mock, folder, mock))
print(f"rayd / ImageFolder+DataLoader: {r / f:.2f}x (target >= 1.0); rayd / mock: {r / rm:.2f}x "
      f"under rayd's harness, {r / m:.2f}x under mp.spawn's (target >= 0.95); "
      f"DataLoader / its mock: {f / m:.2f}x; medians of epochs 2.. of every round")
# Each round's own rayd / mock (the two runs a few seconds apart): how far the machine's noise
# moves the ratio.
per = int(sys.argv[7]) - 1 if int(sys.argv[7]) > 1 else 1
rounds = [statistics.median(x["samples_per_s"] for x in rayd[i:i + per]) /
          statistics.median(x["samples_per_s"] for x in rayd_mock[i:i + per])
          for i in range(0, min(len(rayd), len(rayd_mock)), per)]
print("rayd / mock (rayd's harness) round by round: " +
      ", ".join(f"{x:.2f}x" for x in rounds) + f"; median {statistics.median(rounds):.2f}x")
PY
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
