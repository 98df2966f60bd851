"""rayd Data's side of bench/data/jpeg_pipeline.sh: a command trial (launcher torch, 2 Gloo
ranks) that trains jpeg_common.Net on its shard of the run's `train` dataset (`format: images`,
decoded and randomly cropped by rayd's C++ preprocessing in the rank's actor, and scaled to
float32 there or, for uint8 batches, here), read through rayd.train.get_dataset_shard. Rank 0 reports per epoch samples_per_s over the gang,
loop_wait_s (seconds the loop spent in next(): the data server's wait plus the socket and mapping
of the batch) and train_s; rayd adds data_wait_s (the server's wait for blocks not made yet).

Config: epochs, batch_size, channels, hidden, side (the crop's); with mock_steps, the loop gets
one batch (the shard's first, read once before the first epoch) that many times an epoch: the
mock loader, under the same harness (rayd's ranks, launcher and reports).
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn

import rayd.train as rt
from jpeg_common import Net, train_epoch


def main():
    torch.set_num_threads(1)
    config = rt.get_config()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    dist.init_process_group("gloo")
    torch.manual_seed(42)
    model = nn.parallel.DistributedDataParallel(
        Net(config["channels"], config["hidden"], config["side"]))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    batch, steps = config["batch_size"], config.get("mock_steps")
    shard = rt.get_dataset_shard("train")

    def read(epoch):
        for b in shard.iter_batches(batch_size=batch, epoch=epoch, batch_format="torch"):
            # [B, S, S, 1] as [B, 1, S, S] (one channel: a view), uint8 scaled to [0, 1) here
            # (ToTensor's work) unless a to_float32 transform did it already.
            x = b["image"].permute(0, 3, 1, 2)
            yield (x.float().div_(255) if x.dtype == torch.uint8 else x), b["label"]

    if steps:
        mock = tuple(t.clone() for t in next(read(0)))

    def batches(epoch):
        if steps:
            yield from (mock for _ in range(steps))
        else:
            yield from read(epoch)

    for epoch in range(config["epochs"]):
        model.train()
        row = train_epoch(model, opt, batches(epoch), world)
        row["epoch"] = epoch
        rt.report(row)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
