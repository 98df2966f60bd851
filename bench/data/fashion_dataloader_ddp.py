"""The peer of bench/data/fashion_ingest.sh: Fashion-MNIST into 2 DDP ranks (Gloo) through
PyTorch's own DataLoader over torchvision's FashionMNIST, the same network and batch as
examples/trainables/fashion_mnist.cc. Prints one JSON line per epoch: samples/s over the gang
and rank 0's seconds waiting for data.

    /usr/bin/python3 fashion_dataloader_ddp.py ROOT EPOCHS BATCH CHANNELS HIDDEN WORKERS

ROOT holds FashionMNIST/raw/ with the un-gzipped IDX files (torchvision's layout).
"""
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, Subset
from torchvision import datasets, transforms


class Net(nn.Module):
    def __init__(self, channels, hidden):
        super().__init__()
        self.conv1 = nn.Conv2d(1, channels, 3, padding=1)
        self.conv2 = nn.Conv2d(channels, 2 * channels, 3, padding=1)
        self.fc1 = nn.Linear(2 * channels * 7 * 7, hidden)
        self.fc2 = nn.Linear(hidden, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def rank_main(rank, world, args):
    root, epochs, batch, channels, hidden, workers = args
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(42)
    model = DDP(Net(channels, hidden))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    data = datasets.FashionMNIST(root, train=True, download=False,
                                 transform=transforms.ToTensor())
    data = Subset(data, range(55000))  # as the rayd run: rows [0, 55000)
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=batch, sampler=sampler, num_workers=workers,
                        persistent_workers=workers > 0)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        model.train()
        rows, waited = 0, 0.0
        start = time.monotonic()
        it = iter(loader)
        while True:
            t = time.monotonic()
            try:
                x, y = next(it)
            except StopIteration:
                break
            waited += time.monotonic() - t
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
            rows += y.shape[0]
        elapsed = time.monotonic() - start
        if rank == 0:
            print(json.dumps({"epoch": epoch, "samples_per_s": rows * world / elapsed,
                              "data_wait_s": waited, "train_s": elapsed}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    root = sys.argv[1]
    args = (root, int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]),
            int(sys.argv[6]))
    os.environ["MASTER_PORT"] = os.environ.get("MASTER_PORT", "29533")
    mp.spawn(rank_main, args=(2, args), nprocs=2)
