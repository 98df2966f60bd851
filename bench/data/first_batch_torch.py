"""The peer of bench/data/first_batch.cc: a PyTorch DDP script's time from its process start
(exec, from /proc) to the first batch in a rank: `import torch, torchvision`, 2 ranks forked,
each forming its Gloo group, building the dataset (idx: torchvision's FashionMNIST, which reads
the un-gzipped IDX files whole into memory; images: ImageFolder's scan of the folder, PIL
decoding as grayscale, RandomCrop(56) + ToTensor), a DistributedSampler and a DataLoader with
WORKERS worker processes, then next(iter(loader)). Prints one JSON line: the slower rank's
seconds, each rank's, and when rank 0 started, had its group and its dataset.

    /usr/bin/python3 first_batch_torch.py idx|images ROOT [WORKERS=1] [BATCH=64]

ROOT: for idx, a folder holding FashionMNIST/raw/ (torchvision's layout); for images, the
ImageFolder tree.
"""
import os
import time


def process_start_unix(pid="self"):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = int(fields[19])  # field 22, starttime, in clock ticks since boot
    with open("/proc/stat") as f:
        btime = next(int(line.split()[1]) for line in f if line.startswith("btime "))
    return btime + ticks / os.sysconf("SC_CLK_TCK")


START = process_start_unix()

import json  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from PIL import Image  # noqa: E402
from torch.utils.data import DataLoader, DistributedSampler  # noqa: E402
from torchvision import datasets, transforms  # noqa: E402


def gray_loader(path):
    with open(path, "rb") as f:
        return Image.open(f).convert("L")


def rank_main(rank, world, mode, root, workers, batch, out):
    stages = {"rank_start": time.time() - START, "start_method": mp.get_start_method()}
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    dist.init_process_group("gloo", rank=rank, world_size=world)
    stages["group"] = time.time() - START
    if mode == "idx":
        data = datasets.FashionMNIST(root, train=True, download=False,
                                     transform=transforms.ToTensor())
    else:
        data = datasets.ImageFolder(root, loader=gray_loader, transform=transforms.Compose(
            [transforms.RandomCrop(56), transforms.ToTensor()]))
    stages["dataset"] = time.time() - START
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=batch, sampler=sampler, num_workers=workers)
    it = iter(loader)
    stages["iter"] = time.time() - START
    x, y = next(it)
    out.put((rank, time.time(), stages))
    dist.destroy_process_group()


if __name__ == "__main__":
    mode, root = sys.argv[1], sys.argv[2]
    workers = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    batch = int(sys.argv[4]) if len(sys.argv) > 4 else 64
    if mode not in ("idx", "images"):
        sys.exit(f"MODE: expected idx or images, got {mode!r}")
    os.environ["MASTER_PORT"] = os.environ.get("MASTER_PORT", "29535")
    # The ranks are forked from this process, torch already imported, and so are their
    # DataLoader workers: the quickest start PyTorch offers (mp.spawn's ranks, or torchrun's,
    # import torch again, ~2.4 s of CPU each here; a spawned rank's workers would too).
    ctx = mp.get_context("fork")
    out = ctx.SimpleQueue()
    mp.start_processes(rank_main, args=(2, mode, root, workers, batch, out), nprocs=2,
                       start_method="fork")
    stamps = sorted(out.get() for _ in range(2))
    print(json.dumps({"mode": mode, "workers": workers,
                      "first_batch_s": max(t for _, t, _ in stamps) - START,
                      "ranks_s": [t - START for _, t, _ in stamps],
                      "rank0_stages_s": stamps[0][2]}), flush=True)
