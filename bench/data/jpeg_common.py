"""What both sides of bench/data/jpeg_pipeline.sh share: the network (the CNN of
fashion_dataloader_ddp.py for crops of SIDE x SIDE pixels, one channel) and the timed epoch."""
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self, channels, hidden, side):
        super().__init__()
        self.conv1 = nn.Conv2d(1, channels, 3, padding=1)
        self.conv2 = nn.Conv2d(channels, 2 * channels, 3, padding=1)
        self.fc1 = nn.Linear(2 * channels * (side // 4) ** 2, hidden)
        self.fc2 = nn.Linear(hidden, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def train_epoch(model, opt, batches, world):
    """One pass over `batches` (an iterable of (x float [B, 1, S, S], y int64 [B])): images/s
    over the gang, seconds waiting for the next batch, the epoch's seconds and this process's CPU
    seconds in them."""
    rows, waited = 0, 0.0
    start, cpu = time.monotonic(), time.process_time()
    it = iter(batches)
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
    return {"samples_per_s": rows * world / elapsed, "loop_wait_s": waited, "train_s": elapsed,
            "cpu_s": time.process_time() - cpu, "rows": rows}
