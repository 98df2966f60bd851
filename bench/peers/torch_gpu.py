#!/usr/bin/env python3
"""The peer of bench/gpu_bench: Python torch training on one CUDA device.

The same two models and batches as gpu_bench (the example MLP 784-128-64-10 at batch 64, and a
~54M-parameter MLP 784-4096x4-10 at batch 256), SGD with momentum, data resident on the device:
plain torch, and torch DistributedDataParallel over a 1-rank NCCL group. Also the time to form
that group and to run its first all-reduce. Run on the GPU machine (its python3 has CUDA torch):

    python3 bench/peers/torch_gpu.py [--steps 300] [--json]
"""

import argparse
import json
import os
import socket
import time

import torch
import torch.distributed as dist
import torch.nn as nn

MODELS = [("example_mlp", [784, 128, 64, 10], 64), ("mlp_54m", [784, 4096, 4096, 4096, 4096, 10], 256)]


def mlp(widths):
    layers = []
    for i in range(len(widths) - 1):
        layers.append(nn.Linear(widths[i], widths[i + 1]))
        if i + 2 < len(widths):
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def train(widths, batch, steps, ddp):
    device = torch.device("cuda", 0)
    torch.manual_seed(0)
    model = mlp(widths).to(device)
    if ddp:
        model = nn.parallel.DistributedDataParallel(model, device_ids=[0])
    x = torch.randn(16, batch, widths[0], device=device)
    y = torch.randint(widths[-1], (16, batch), device=device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step(i):
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x[i % 16]), y[i % 16]).backward()
        optimizer.step()

    for i in range(20):
        step(i)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for i in range(steps):
        step(i)
    torch.cuda.synchronize()
    return steps * batch / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(0)
    t0 = time.perf_counter()
    dist.init_process_group("nccl", rank=0, world_size=1)
    figures = {"nccl_group_setup_s": time.perf_counter() - t0}
    probe = torch.ones(1024, device="cuda")
    t1 = time.perf_counter()
    dist.all_reduce(probe)
    torch.cuda.synchronize()
    figures["nccl_first_allreduce_s"] = time.perf_counter() - t1
    for name, widths, batch in MODELS:
        figures[name + "_ddp_samples_per_s"] = train(widths, batch, args.steps, ddp=True)
        figures[name + "_plain_samples_per_s"] = train(widths, batch, args.steps, ddp=False)
    dist.destroy_process_group()
    if args.json:
        print(json.dumps(figures))
    else:
        for name, value in figures.items():
            print(f"{name:36s} {value:.6g}")


if __name__ == "__main__":
    main()
