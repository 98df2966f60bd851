#!/usr/bin/python3
"""The peer of bench/train_bench: Python torch DistributedDataParallel over Gloo on this machine.

Trains the example MLP (784-512-256-10, batch 64 per rank, SGD) on synthetic data for 1 rank and
for 2 DDP ranks, and times a 25 MB all-reduce between 2 ranks through raw c10d Gloo. Each rank
uses one intra-op thread, as rayd's workers do. Run it with Debian's interpreter, which sees
Debian's python3-torch:

    /usr/bin/python3 bench/peers/torch_ddp.py [--steps 300] [--json]

Prints one line per figure (or one JSON object with --json).
"""

import argparse
import json
import os
import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn

BATCH = 64
ALLREDUCE_BYTES = 25 * 1000 * 1000


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def mlp():
    return nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                         nn.Linear(256, 10))


def train(rank, world, port, steps, out):
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = mlp()
    if world > 1:
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
        dist.init_process_group("gloo", rank=rank, world_size=world)
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(BATCH, 784, generator=g)
    y = torch.randint(0, 10, (BATCH,), generator=g)
    warmup = max(steps // 10, 5)
    for step in range(steps + warmup):
        if step == warmup:
            start = time.perf_counter()
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
    elapsed = time.perf_counter() - start
    if rank == 0:
        out.put(world * BATCH * steps / elapsed)
    if world > 1:
        dist.destroy_process_group()


def allreduce(rank, world, port, iters, out):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    t = torch.ones(ALLREDUCE_BYTES // 4)
    for _ in range(3):
        dist.all_reduce(t)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(t)
    elapsed = (time.perf_counter() - start) / iters
    if rank == 0:
        out.put(elapsed)
    dist.destroy_process_group()


def run(fn, world, *args):
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=fn, args=(r, world, port, *args, out)) for r in range(world)]
    for p in procs:
        p.start()
    value = out.get(timeout=600)
    for p in procs:
        p.join()
    return value


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--allreduce-iters", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    figures = {
        "torch_version": torch.__version__,
        "samples_per_s_1_rank": run(train, 1, args.steps),
        "samples_per_s_2_ranks_ddp_gloo": run(train, 2, args.steps),
    }
    seconds = run(allreduce, 2, args.allreduce_iters)
    figures["allreduce_25MB_ms"] = seconds * 1000
    figures["allreduce_25MB_GBps"] = ALLREDUCE_BYTES / seconds / 1e9
    if args.json:
        print(json.dumps(figures))
    else:
        for key, value in figures.items():
            print(f"{key}: {value:.1f}" if isinstance(value, float) else f"{key}: {value}")


if __name__ == "__main__":
    main()
