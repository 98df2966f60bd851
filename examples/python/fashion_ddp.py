"""fashion_ddp.py: a plain PyTorch DDP script that trains on Fashion-MNIST read by rayd Data.

The network of examples/trainables/fashion_mnist.cc (conv 3x3 - pool - conv 3x3 - pool -
linear - linear), DistributedDataParallel over Gloo as torchrun would start it; the data comes
from the run's `datasets:` (train and validation: images and labels) through
rt.get_dataset_shard: each rank iterates its own shard of each epoch as NumPy arrays, which
rayd reads, shuffles and shards in C++ (docs/data.md). No DataLoader, no torchvision.

    rayd tune examples/tune_python_fashion.yaml

Config keys (all optional): lr (0.05), momentum (0.9), channels (8), hidden (64), batch_size per
worker (64), epochs (3). Every rank reports accuracy, loss (validation, summed over the ranks),
train_loss and epoch; rank 0's report carries a checkpoint, from which a resumed run continues.
"""

import os
import shutil
import tempfile

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import rayd.train as rt


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


def tensors(batch):
    """A batch of NumPy arrays (uint8 images over shared memory) as the network's input."""
    x = torch.from_numpy(batch["image"]).to(torch.float32).div_(255.0).unsqueeze(1)
    y = torch.from_numpy(batch["label"].astype(np.int64))
    return x, y


def main():
    torch.set_num_threads(1)
    config = rt.get_config()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        dist.init_process_group("gloo")
    torch.manual_seed(42)
    model = Net(config.get("channels", 8), config.get("hidden", 64))
    start = 0
    checkpoint = rt.get_checkpoint()
    if checkpoint is not None:
        state = torch.load(os.path.join(checkpoint, "checkpoint.pt"), map_location="cpu")
        model.load_state_dict(state["model"])
        start = state["epoch"] + 1
    ddp = nn.parallel.DistributedDataParallel(model) if world > 1 else model
    optimizer = torch.optim.SGD(ddp.parameters(), lr=config.get("lr", 0.05),
                                momentum=config.get("momentum", 0.9))
    train = rt.get_dataset_shard("train")
    validation = rt.get_dataset_shard("validation")
    batch_size = config.get("batch_size", 64)
    for epoch in range(start, config.get("epochs", 3)):
        ddp.train()
        losses = []
        for batch in train.iter_batches(batch_size=batch_size, epoch=epoch):
            x, y = tensors(batch)
            optimizer.zero_grad()
            loss = F.cross_entropy(ddp(x), y)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        ddp.eval()
        totals = torch.zeros(3, dtype=torch.float64)  # correct, loss sum, rows
        with torch.no_grad():
            for batch in validation.iter_batches(batch_size=512, epoch=0):
                x, y = tensors(batch)
                logits = model(x)
                totals += torch.tensor([(logits.argmax(1) == y).sum().item(),
                                        F.cross_entropy(logits, y, reduction="sum").item(),
                                        y.shape[0]], dtype=torch.float64)
        if world > 1:
            dist.all_reduce(totals)
        metrics = {"accuracy": totals[0].item() / totals[2].item(),
                   "loss": totals[1].item() / totals[2].item(),
                   "train_loss": sum(losses) / max(len(losses), 1), "epoch": epoch}
        if rt.get_context().world_rank != 0:
            rt.report(metrics)
            continue
        staging = tempfile.mkdtemp(prefix="fashion-ckpt-")
        torch.save({"model": model.state_dict(), "epoch": epoch},
                   os.path.join(staging, "checkpoint.pt"))
        # The plain network as TorchScript, for C++ batch inference (docs/data.md).
        torch.jit.script(model).save(os.path.join(staging, "model.ts"))
        rt.report(metrics, checkpoint=staging)  # copied by the time it returns
        shutil.rmtree(staging, ignore_errors=True)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
