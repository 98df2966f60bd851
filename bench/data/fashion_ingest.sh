#!/usr/bin/env bash
# Fashion-MNIST into 2 data-parallel ranks, the same network and batch on both sides, in one run:
# rayd Data (`rayd train` of examples/trainables/fashion_mnist.cc over Gloo, the images read from
# Debian's gzipped IDX files) against PyTorch's DataLoader over torchvision's FashionMNIST (the
# same files, un-gzipped, as torchvision wants them) in a DDP script
# (bench/data/fashion_dataloader_ddp.py). Prints each side's samples/s and rank 0's time waiting
# for data per epoch, the ratio, and the load the run had.
#
#   bench/data/fashion_ingest.sh [EPOCHS=3] [BATCH=64] [CHANNELS=8] [HIDDEN=64]
#   BURNERS=2 bench/data/fashion_ingest.sh     # the same beside two CPU burners
#   LOADER_WORKERS=1 ...                        # DataLoader num_workers (default 0: 2 cores)
set -euo pipefail
cd "$(dirname "$0")/../.."
epochs="${1:-3}" batch="${2:-64}" channels="${3:-8}" hidden="${4:-64}"
rayd="${RAYD_BIN:-build/cli/rayd}"
source bench/data/common.sh
bench_work rayd-bench-ingest
start_burners

# torchvision's layout: root/FashionMNIST/raw/<un-gzipped files>.
mkdir -p "$work/tv/FashionMNIST/raw"
for f in /usr/share/datasets/fashion-mnist/*.gz; do
  gzip -dc "$f" >"$work/tv/FashionMNIST/raw/$(basename "${f%.gz}")"
done

cat >"$work/train.yaml" <<YAML
name: ingest
train_loop: fashion_mnist_cnn
config: {lr: 0.05, batch_size: $batch, channels: $channels, hidden: $hidden, epochs: $epochs}
scaling: {num_workers: 2, resources_per_worker: {CPU: 1}}
datasets:
  train:
    format: idx
    paths: [/usr/share/datasets/fashion-mnist/train-*-ubyte.gz]
    rows: [0, 55000]
  validation:
    format: idx
    paths: [/usr/share/datasets/fashion-mnist/t10k-*-ubyte.gz]
    shuffle: false
    transforms: [{limit: 512}]
run: {storage_path: $work/results}
YAML

echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg); burners: ${BURNERS:-0}"
RAYD_TEMP_DIR="$work/tmp" "$rayd" train "$work/train.yaml" >"$work/rayd.out" 2>&1 ||
  { cat "$work/rayd.out"; exit 1; }
/usr/bin/python3 bench/data/fashion_dataloader_ddp.py "$work/tv" "$epochs" "$batch" "$channels" \
  "$hidden" "${LOADER_WORKERS:-0}" >"$work/torch.out" 2>"$work/torch.err" ||
  { cat "$work/torch.err"; exit 1; }

/usr/bin/python3 - "$work/results/ingest/result.json" "$work/torch.out" <<'PY'
import json, statistics, sys
rayd = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
torch = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
# The first epoch warms caches (and rayd's inflates the gzip files): report the later ones.
def later(rows):
    return rows[1:] if len(rows) > 1 else rows
r_sps = statistics.median(r["samples_per_s"] for r in later(rayd))
t_sps = statistics.median(t["samples_per_s"] for t in later(torch))
r_wait = statistics.median(r["data_wait_s"] for r in later(rayd))
t_wait = statistics.median(t["data_wait_s"] for t in later(torch))
r_step = statistics.median(55000 / r["samples_per_s"] for r in later(rayd))
t_step = statistics.median(t["train_s"] for t in later(torch))
print(f"{'':28} {'samples/s':>10} {'data wait/epoch':>16} {'wait share':>10}")
print(f"{'rayd Data (C++ loop)':28} {r_sps:10.0f} {r_wait:15.3f}s {r_wait / r_step:10.2%}")
print(f"{'PyTorch DataLoader (DDP)':28} {t_sps:10.0f} {t_wait:15.3f}s {t_wait / t_step:10.2%}")
print(f"rayd / DataLoader: {r_sps / t_sps:.2f}x samples/s (median of epochs 2..)")
PY
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
