#!/usr/bin/env bash
# The GPU machine's one command: builds rayd against the machine's CUDA LibTorch (PyTorch's),
# runs the tests labelled `gpu` and the GPU benchmarks next to Python torch, and writes
# docs/gpu.md with the device, driver, CUDA, NCCL and LibTorch versions and every figure with
# the command that made it. From the project root:
#
#   scripts/gpu-deps.sh fetch                 # here, on a machine with Debian's registry
#   scripts/gpu-check.sh                      # there (device tool: carry .deps); OUT=dir for logs
#
# Without a GPU (or without CUDA LibTorch) it stops at the first step and says why.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-$PWD/gpu-check-out}"
mkdir -p "$out"
log() { echo "== $*" | tee -a "$out/steps.log"; }
run() {  # run NAME CMD...: output to $out/NAME.log, exit status recorded
  log "$1: ${*:2}"
  local start=$SECONDS
  "${@:2}" >"$out/$1.log" 2>&1
  local rc=$?
  echo "   exit $rc after $((SECONDS - start)) s" | tee -a "$out/steps.log"
  return $rc
}

if ! nvidia-smi -L >"$out/nvidia-smi.log" 2>&1; then
  echo "gpu-check: no GPU answers here (nvidia-smi -L failed; see $out/nvidia-smi.log)" >&2
  exit 77
fi
if [ -d .deps/debs ]; then eval "$(scripts/gpu-deps.sh unpack)"; fi
torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)') || {
  echo "gpu-check: python3 has no torch (CUDA LibTorch comes from PyTorch)" >&2
  exit 1
}
export CMAKE_PREFIX_PATH="${CMAKE_PREFIX_PATH:-}${CMAKE_PREFIX_PATH:+:}$torch_prefix"
export CUDACXX=/usr/local/cuda/bin/nvcc PATH="/usr/local/cuda/bin:$PATH"
build=build-gpu
run configure cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DRAYD_WITH_CUDA=ON \
  -DCUDAToolkit_ROOT=/usr/local/cuda || { tail -40 "$out/configure.log"; exit 1; }
run build cmake --build "$build" -j "$(nproc)" --target rayd rayd_cli_tune example_loops example_trainables \
  gpu_test gpu_bench || { grep -m 20 -B2 -A8 "error" "$out/build.log"; exit 1; }

export RAYD_GPU_FIGURES="$out/test-figures.txt"
: >"$RAYD_GPU_FIGURES"
(cd "$build" && run tests ctest -L gpu --output-on-failure)
tests_rc=$?

run rayd_bench "$build/bench/gpu_bench" --json
run torch_bench python3 bench/peers/torch_gpu.py --json

# The fractional sweep: four trials at once on a quarter GPU each, then one at a time.
sweep() {  # sweep CONCURRENCY: seconds of `rayd tune` (peak device memory per process aside)
  local dir="$out/sweep-$1"
  mkdir -p "$dir"
  sed -e "s/max_concurrent_trials: 4/max_concurrent_trials: $1/" \
      -e "s#storage_path: ./rayd_results#storage_path: $dir/results#" bench/gpu_sweep.yaml \
      >"$dir/sweep.yaml"
  (while sleep 0.5; do
     nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits
   done) >"$dir/memory.csv" 2>/dev/null &
  local sampler=$!
  local start=$(date +%s%N)
  "$build/cli/rayd" tune "$dir/sweep.yaml" >"$dir/tune.log" 2>&1
  local rc=$?
  local end=$(date +%s%N)
  kill "$sampler" 2>/dev/null
  echo "$rc $(( (end - start) / 1000000 ))e-3" >"$dir/took"
}
log "sweep 4 at once"; sweep 4
log "sweep 1 at a time"; sweep 1

# A Python command trainable on the GPU: examples/python/mlp_ddp.py, one rank over NCCL
# (CUDA_VISIBLE_DEVICES from its bundle; the script picks NCCL when it sees a device).
run python_gpu "$build/cli/rayd" train --num-workers 1 --use-gpu --name python-gpu \
  --storage-path "$out/python-gpu" --config '{"epochs": 3, "train_size": 8192}' -- \
  python3 examples/python/mlp_ddp.py
grep -h "backend" "$out/python-gpu/python-gpu/rank_0.log" >"$out/python_gpu_backend.txt" 2>/dev/null

python3 - "$out" "$tests_rc" <<'PY'
import json, os, subprocess, sys
out, tests_rc = sys.argv[1], int(sys.argv[2])
def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=60).stdout.strip()
    except Exception as e:
        return f"({e})"
def load(name):
    try:
        return json.loads(open(os.path.join(out, name + ".log")).read().strip().splitlines()[-1])
    except Exception:
        return {}
rayd, torch = load("rayd_bench"), load("torch_bench")
def took(c):
    try:
        rc, s = open(os.path.join(out, f"sweep-{c}", "took")).read().split()
        return int(rc), float(s)
    except Exception:
        return None, None
def peak_mib(c):
    peak = {}
    try:
        for line in open(os.path.join(out, f"sweep-{c}", "memory.csv")):
            pid, mib = [x.strip() for x in line.split(",")]
            peak[pid] = max(peak.get(pid, 0), float(mib))
    except Exception:
        pass
    return sorted(peak.values())
torch_version = sh("python3 -c 'import torch; print(torch.__version__)'")
nccl_version = sh("python3 -c 'import torch; print(*torch.cuda.nccl.version(), sep=\".\")'")
lines = ["Written by `scripts/gpu-check.sh` below this line (run it again rather than editing).",
         "One run, one machine.", "",
         "## Machine", "",
         "- Device: " + sh("nvidia-smi --query-gpu=name,memory.total --format=csv,noheader"),
         "- Driver: " + sh("nvidia-smi --query-gpu=driver_version --format=csv,noheader"),
         "- CUDA toolkit: " + sh("/usr/local/cuda/bin/nvcc --version | tail -2 | head -1"),
         "- PyTorch / LibTorch: " + torch_version,
         "- NCCL (PyTorch's): " + nccl_version,
         f"- CPU cores: {os.cpu_count()}", "",
         "## Tests", "",
         f"`ctest -L gpu` in build-gpu: exit {tests_rc} (log: tests.log). The machine has one GPU, so the",
         "multi-rank NCCL case is skipped there (NCCL refuses two ranks of one group on one GPU); the",
         "multi-rank logic is shared with the Gloo path, which CI tests on every commit.", ""]
try:
    for row in open(os.path.join(out, "test-figures.txt")):
        lines.append(f"- {row.strip()}")
except Exception:
    pass
lines += ["", "## Training throughput, 1 rank (`build-gpu/bench/gpu_bench --json` next to `python3 bench/peers/torch_gpu.py --json`)", "",
          "| figure | rayd (LibTorch) | Python torch | rayd / torch |", "|---|---|---|---|"]
for key in sorted(set(rayd) | set(torch)):
    a, b = rayd.get(key), torch.get(key)
    ratio = f"{a / b:.2f}" if a and b else ""
    lines.append(f"| {key} | {a if a is not None else ''} | {b if b is not None else ''} | {ratio} |")
rc4, t4 = took(4)
rc1, t1 = took(1)
lines += ["", "## Four 0.25-GPU trials at once (`rayd tune` of bench/gpu_sweep.yaml, 8 trials)", ""]
lines.append(f"- 4 at once: {t4} s (exit {rc4}); 1 at a time: {t1} s (exit {rc1})")
if t4 and t1:
    lines.append(f"- throughput ratio (1-at-a-time time / 4-at-once time): {t1 / t4:.2f} (target >= 2.5)")
lines.append(f"- peak device memory per process, MiB, 4 at once: {peak_mib(4)}")
try:
    backend = open(os.path.join(out, "python_gpu_backend.txt")).read().strip()
except Exception:
    backend = "(no rank log)"
lines += ["", "## A Python command trainable on the GPU (`rayd train --use-gpu -- python3 examples/python/mlp_ddp.py`)", "",
          f"- rank 0 said: {backend} (log: python_gpu.log)"]
# docs/gpu.md keeps its hand-written part, up to the marker; the figures replace the rest.
marker = "<!-- figures: written by scripts/gpu-check.sh -->"
doc = open("docs/gpu.md").read() if os.path.exists("docs/gpu.md") else "# rayd on a GPU\n\n"
head = doc.split(marker)[0].rstrip("\n") + "\n\n" + marker + "\n\n"
text = head + "\n".join(lines) + "\n"
open("docs/gpu.md", "w").write(text)
open(os.path.join(out, "gpu.md"), "w").write(text)
print("\n".join(lines))
PY
exit $tests_rc
