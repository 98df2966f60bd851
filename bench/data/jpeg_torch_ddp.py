"""The peers of bench/data/jpeg_pipeline.sh: jpeg_common.Net in 2 DDP ranks (Gloo), fed by
  imagefolder: torchvision's ImageFolder (PIL decodes each JPEG, as grayscale) with
              RandomCrop(SIDE) + ToTensor, through a DataLoader with WORKERS worker processes
              per rank and a DistributedSampler;
  mock:       one batch (the DataLoader's first, made before the first epoch) handed to the loop
              every step, as many steps as the DataLoader would take (Ray's ingest benchmarks'
              upper bound: no data path at all).
Prints one JSON line per epoch (rank 0): samples_per_s over the gang, loop_wait_s, train_s.

    /usr/bin/python3 jpeg_torch_ddp.py MODE ROOT EPOCHS BATCH CHANNELS HIDDEN SIDE WORKERS
"""
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from PIL import Image
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler
from torchvision import datasets, transforms

from jpeg_common import Net, train_epoch


def gray_loader(path):
    with open(path, "rb") as f:
        return Image.open(f).convert("L")


class Mock:
    """`steps` times the same batch."""

    def __init__(self, batch, steps):
        self.batch, self.steps = batch, steps

    def __iter__(self):
        for _ in range(self.steps):
            yield self.batch


def rank_main(rank, world, args):
    mode, root, epochs, batch, channels, hidden, side, workers = args
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(42)
    model = DDP(Net(channels, hidden, side))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    data = datasets.ImageFolder(root, loader=gray_loader, transform=transforms.Compose(
        [transforms.RandomCrop(side), transforms.ToTensor()]))
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=batch, sampler=sampler, num_workers=workers,
                        persistent_workers=workers > 0)
    if mode == "mock":  # the first batch, made without worker processes
        first = next(iter(DataLoader(data, batch_size=batch, sampler=sampler)))
        loader = Mock(first, len(loader))
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        model.train()
        row = train_epoch(model, opt, loader, world)
        row["epoch"] = epoch
        if rank == 0:
            print(json.dumps(row), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode not in ("imagefolder", "mock"):
        sys.exit(f"MODE: expected imagefolder or mock, got {mode!r}")
    args = (mode, sys.argv[2], *(int(a) for a in sys.argv[3:9]))
    os.environ["MASTER_PORT"] = os.environ.get("MASTER_PORT", "29534")
    ranks = int(os.environ.get("RANKS", "2"))
    mp.spawn(rank_main, args=(ranks, args), nprocs=ranks)
