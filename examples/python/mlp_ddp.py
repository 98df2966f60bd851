"""mlp_ddp.py: a plain PyTorch DDP script as a rayd command trainable.

The 784-512-256-10 MLP of the usual distributed-training guides, trained with
DistributedDataParallel over torch.distributed's env:// rendezvous, as torchrun
would start it; rayd's torch launcher sets the same variables (MASTER_ADDR,
RANK, WORLD_SIZE, ...). The only rayd-specific lines are rt.get_config(),
rt.get_checkpoint() and rt.report(); run by hand they fall back to defaults
and printing, so the script runs anywhere:

    cd examples/python && /usr/bin/python3 mlp_ddp.py
    PYTHONPATH=../../python /usr/bin/python3 -m torch.distributed.run --nproc_per_node 2 mlp_ddp.py
    rayd tune examples/tune_python.yaml

(Debian 12's torchrun, PyTorch 1.13 under Python 3.11, also needs `--redirects 2 --tee 2`.)

The data is generated, as in examples/trainables/mlp_classifier.cc (no downloads): 10
classes in 784 dimensions, each a fixed random prototype drawn from `data_seed`; a
sample is its class's prototype scaled by `signal` plus unit Gaussian noise. Each
epoch draws fresh training samples (the same on every rank, from `data_seed` and the
epoch); a DistributedSampler gives each rank its shard.

Config keys (all optional): lr (0.05), momentum (0.9), batch_size per worker (64),
epochs (5), train_size (4096 per epoch), val_size (1024), signal (0.08), data_seed (0).
One epoch is one training_iteration: rank 0 evaluates, every rank reports loss
(validation), accuracy, train_loss, effective_batch_size, epoch and samples_per_s,
and rank 0's report carries a checkpoint. A resumed run (after a failure, a pause,
or PBT's exploit) continues after its checkpoint's epoch with the config's lr and
momentum, which PBT may have changed.

Backend: NCCL when CUDA is available and CUDA_VISIBLE_DEVICES is not set to "" (rayd
sets it to "" for a rank that holds no GPU), else Gloo. Without WORLD_SIZE it trains
as a single process, without a process group.
"""

import os
import shutil
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

try:
    import rayd.train as rt
except ImportError:  # run by hand from a checkout without PYTHONPATH
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "python"))
    import rayd.train as rt

INPUTS = 784
CLASSES = 10


def generate(n, signal, seed, offset):
    """n samples of the generated task (on the CPU, so every device sees the same ones);
    `offset` keeps validation (0) and each epoch's training draw (epoch + 1) apart."""
    prototypes = torch.randn(CLASSES, INPUTS, generator=torch.Generator().manual_seed(seed))
    draw = torch.Generator().manual_seed(seed * 1_000_003 + offset)
    y = torch.randint(CLASSES, (n,), generator=draw)
    x = prototypes[y] * signal + torch.randn(n, INPUTS, generator=draw)
    return x, y


def make_model():
    return nn.Sequential(nn.Linear(INPUTS, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                         nn.Linear(256, CLASSES))


def read_config(config):
    """The config keys above, with their defaults (mlp_horovod.py reads the same):
    (lr, momentum, batch_size, epochs, train_size, val_size, signal, data_seed)."""
    return (float(config.get("lr", 0.05)), float(config.get("momentum", 0.9)),
            max(int(config.get("batch_size", 64)), 1), int(config.get("epochs", 5)),
            int(config.get("train_size", 4096)), int(config.get("val_size", 1024)),
            float(config.get("signal", 0.08)), int(config.get("data_seed", 0)))


def main():
    (lr, momentum, batch_size, epochs, train_size, val_size, signal,
     data_seed) = read_config(rt.get_config())

    torch.set_num_threads(max(int(os.environ.get("OMP_NUM_THREADS", "1")), 1))

    distributed = "WORLD_SIZE" in os.environ
    use_cuda = torch.cuda.is_available() and os.environ.get("CUDA_VISIBLE_DEVICES") != ""
    if distributed:
        backend = "nccl" if use_cuda else "gloo"
        dist.init_process_group(backend=backend, init_method="env://")
        rank, world_size = dist.get_rank(), dist.get_world_size()
    else:
        backend, rank, world_size = "none", 0, 1
    if use_cuda:
        # rayd shows a rank only its own GPUs (cuda:0); torchrun on a multi-GPU machine shows all.
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    print(f"rank {rank}/{world_size} backend {backend}", flush=True)

    torch.manual_seed(42)  # rank 0's initial weights are broadcast anyway; this makes runs repeatable
    model = make_model().to(device)  # before the optimizer, whose state follows its parameters
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    start_epoch = 0
    checkpoint = rt.get_checkpoint()
    if checkpoint is not None:
        state = torch.load(os.path.join(checkpoint, "checkpoint.pt"), map_location="cpu")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])  # momentum buffers (moved to `device`)
        # and the old lr, which the config's replaces (PBT's exploit may have explored it)
        for group in optimizer.param_groups:
            group["lr"], group["momentum"] = lr, momentum
        start_epoch = int(state["epoch"]) + 1
        if rank == 0:
            print(f"resumed from epoch {state['epoch']} lr {lr!r}", flush=True)
    if distributed:
        net = DistributedDataParallel(model, device_ids=[device.index] if use_cuda else None)
    else:
        net = model

    val_x, val_y = generate(val_size, signal, data_seed, 0)
    val_x, val_y = val_x.to(device), val_y.to(device)
    for epoch in range(start_epoch, epochs):
        train_set = TensorDataset(*generate(train_size, signal, data_seed, epoch + 1))
        sampler = DistributedSampler(train_set, num_replicas=world_size, rank=rank, shuffle=True,
                                     seed=data_seed)
        sampler.set_epoch(epoch)
        loader = DataLoader(train_set, batch_size=batch_size, sampler=sampler)

        net.train()
        started = time.perf_counter()
        loss_sum = torch.zeros((), device=device)
        steps = 0
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            optimizer.zero_grad()
            loss = F.cross_entropy(net(x), y)
            loss.backward()  # DDP all-reduces the gradient buckets as backward goes
            optimizer.step()
            loss_sum += loss.detach()
            steps += 1
        seconds = time.perf_counter() - started

        # Rank 0 evaluates (on the plain module: no collective); one all-reduce then gives
        # every rank the validation figures and the mean training loss over all ranks.
        stats = torch.tensor([loss_sum.item(), steps, 0.0, 0.0], dtype=torch.float64,
                             device=device)
        if rank == 0:
            model.eval()
            with torch.no_grad():
                logits = model(val_x)
                stats[2] = F.cross_entropy(logits, val_y).item()
                stats[3] = (logits.argmax(1) == val_y).double().mean().item()
        if distributed:
            dist.all_reduce(stats)
        train_loss_sum, total_steps, val_loss, accuracy = stats.tolist()
        metrics = {
            "loss": val_loss,
            "accuracy": accuracy,
            "train_loss": train_loss_sum / max(total_steps, 1.0),
            "effective_batch_size": batch_size * world_size,
            "epoch": epoch,
            "samples_per_s": len(sampler) * world_size / max(seconds, 1e-9),
        }

        if rank != 0:
            rt.report(metrics)  # kept only from rank 0; reporting keeps every rank in step
            continue
        staging = tempfile.mkdtemp(prefix="rayd_mlp_")
        try:
            torch.save({"model": {k: v.cpu() for k, v in model.state_dict().items()},
                        "optimizer": optimizer.state_dict(), "epoch": epoch},
                       os.path.join(staging, "checkpoint.pt"))
            rt.report(metrics, checkpoint=staging)  # copied by the time it returns
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
