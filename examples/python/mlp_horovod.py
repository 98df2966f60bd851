"""mlp_horovod.py: a Horovod script as a rayd command trainable.

The 784-512-256-10 MLP of mlp_ddp.py written the Horovod way: hvd.init(), the
learning rate scaled by hvd.size(), hvd.DistributedOptimizer averaging the
gradients, rank 0's parameters and optimizer state broadcast to every rank, a
DistributedSampler sharding each epoch by hvd.size()/hvd.rank(), and metrics
averaged with hvd.allreduce and kept from rank 0. The only rayd-specific lines
are rt.get_config(), rt.get_checkpoint() and rt.report(), which fall back to
defaults and printing when run by hand:

    rayd train --launcher horovod --num-workers 2 -- /usr/bin/python3 mlp_horovod.py
    rayd tune examples/tune_horovod.yaml
    horovodrun -np 2 -H localhost:2 --gloo python3 mlp_horovod.py

rayd's horovod launcher gives each rank what horovodrun would (HOROVOD_RANK, the
LOCAL_ and CROSS_ pairs, HOROVOD_HOSTNAME, the Gloo interface) and serves the
job's HTTP rendezvous for the attempt (docs/command-trainables.md).

Config keys (all optional), as mlp_ddp.py: lr (0.05, per rank: scaled by the
number of ranks), momentum (0.9), batch_size per rank (64), epochs (5),
train_size (4096), val_size (1024), signal (0.08), data_seed (0). Each epoch
reports loss (validation), accuracy, train_loss, epoch, samples_per_s,
world_size and param_divergence: the largest difference between a rank's
parameter and the ranks' mean (hvd.allreduce), 0 while the replicas agree.
"""

import os
import shutil
import sys
import tempfile
import time

import horovod.torch as hvd
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from mlp_ddp import generate, make_model, read_config

try:
    import rayd.train as rt
except ImportError:  # run by hand from a checkout without PYTHONPATH
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "python"))
    import rayd.train as rt


def divergence(model):
    """The largest |parameter - mean over ranks| on any rank: 0 when the replicas agree."""
    local = max((p.detach() - hvd.allreduce(p.detach(), op=hvd.Average, name=f"check.{name}"))
                .abs().max().item() for name, p in model.named_parameters())
    return hvd.allreduce(torch.tensor(local), op=hvd.Max, name="check.max").item()


def main():
    (lr, momentum, batch_size, epochs, train_size, val_size, signal,
     data_seed) = read_config(rt.get_config())

    hvd.init()
    torch.set_num_threads(max(int(os.environ.get("OMP_NUM_THREADS", "1")), 1))
    rank, size = hvd.rank(), hvd.size()
    print(f"horovod rank {rank}/{size} local {hvd.local_rank()}/{hvd.local_size()} "
          f"cross {hvd.cross_rank()}/{hvd.cross_size()}", flush=True)

    torch.manual_seed(42)
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr * size, momentum=momentum)
    start_epoch = 0
    checkpoint = rt.get_checkpoint()
    if checkpoint is not None and rank == 0:  # the broadcast below gives it to the others
        state = torch.load(os.path.join(checkpoint, "checkpoint.pt"), map_location="cpu")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        for group in optimizer.param_groups:  # the config's, which PBT may have changed
            group["lr"], group["momentum"] = lr * size, momentum
        start_epoch = int(state["epoch"]) + 1
        print(f"resumed from epoch {state['epoch']} lr {lr!r}", flush=True)
    start_epoch = int(hvd.broadcast_object(start_epoch, root_rank=0, name="start_epoch"))
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

    val_x, val_y = generate(val_size, signal, data_seed, 0)
    for epoch in range(start_epoch, epochs):
        train_set = TensorDataset(*generate(train_size, signal, data_seed, epoch + 1))
        sampler = DistributedSampler(train_set, num_replicas=size, rank=rank, shuffle=True,
                                     seed=data_seed)
        sampler.set_epoch(epoch)
        loader = DataLoader(train_set, batch_size=batch_size, sampler=sampler)

        model.train()
        started = time.perf_counter()
        loss_sum, steps = 0.0, 0
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()  # waits for the averaged gradients
            loss_sum += loss.item()
            steps += 1
        seconds = time.perf_counter() - started
        train_loss = hvd.allreduce(torch.tensor(loss_sum / max(steps, 1)), name="train_loss")

        model.eval()
        with torch.no_grad():
            logits = model(val_x)
            val_loss = F.cross_entropy(logits, val_y).item()
            accuracy = (logits.argmax(1) == val_y).double().mean().item()
        metrics = {
            "loss": val_loss,
            "accuracy": accuracy,
            "train_loss": train_loss.item(),
            "epoch": epoch,
            "samples_per_s": len(sampler) * size / max(seconds, 1e-9),
            "world_size": size,
            "param_divergence": divergence(model),
        }
        if rank != 0:
            rt.report(metrics)  # rank 0's is kept; reporting keeps the ranks in step
            continue
        staging = tempfile.mkdtemp(prefix="rayd_hvd_")
        try:
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                        "epoch": epoch}, os.path.join(staging, "checkpoint.pt"))
            rt.report(metrics, checkpoint=staging)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
