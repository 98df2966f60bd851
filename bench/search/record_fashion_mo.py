#!/usr/bin/python3
"""Records the learning curves behind bench/search/data/fashion_mo_curves.csv: a family of
Fashion-MNIST MLPs whose parameter count varies by two orders of magnitude, every config of a
grid trained EPOCHS epochs, its validation accuracy after each epoch; the table the
multi-objective replay (mo_search_bench replay, optuna_mo_replay_peer.py) plays back, with
accuracy (maximised) against parameter count (minimised) and epochs as the fidelity.

  grid     width {8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384} x depth {1, 2, 3} hidden
           layers x Adam lr {1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2} x batch {64, 256}: 504
           configs (1,000 to 530,000 parameters); ReLU, 9 epochs. A grid this size because a
           replay plays a repeated config's curve again: on a small one the searchers that draw
           many configs (MO-ASHA's) would spend much of their budget on repeats, which a live
           sweep over a continuous learning rate does not
  data     /usr/share/datasets/fashion-mnist (IDX, gz): a fixed subset of 10,000 of the first
           50,000 training images to train on (to keep the recording near 15 minutes of one
           core), the last 10,000 training images to validate on; the test set is not used
  seeds    one curve per config: initial weights and batch order from seed 0

Columns: trial_id, training_iteration, val_accuracy, val_loss, train_loss, params,
time_this_iter_s, config/batch_size, config/depth, config/lr, config/width (progress.csv's
layout, as the simulator reads it). One thread (torch.set_num_threads(1)); run it niced:

    OMP_NUM_THREADS=1 nice -n 10 bench/search/record_fashion_mo.py [--out CSV] [--epochs 9]
"""
import argparse
import csv
import gzip
import itertools
import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

DATA = "/usr/share/datasets/fashion-mnist"
WIDTHS = [8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384]
DEPTHS = [1, 2, 3]
LRS = [1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2]
BATCHES = [64, 256]
TRAIN, VAL_FROM = 10000, 50000


def idx(name):
    with gzip.open(os.path.join(DATA, name)) as f:
        data = f.read()
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(data[3])]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * data[3]).reshape(dims)


def load():
    images = idx("train-images-idx3-ubyte.gz").reshape(-1, 784).astype(np.float32) / 255
    images = (images - 0.2860) / 0.3530  # Fashion-MNIST's mean and standard deviation
    labels = idx("train-labels-idx1-ubyte.gz").astype(np.int64)
    subset = np.random.default_rng(0).permutation(VAL_FROM)[:TRAIN]
    x, y = torch.from_numpy(images), torch.from_numpy(labels)
    return (x[subset], y[subset]), (x[VAL_FROM:], y[VAL_FROM:])


def model(width, depth):
    layers, inputs = [], 784
    for _ in range(depth):
        layers += [torch.nn.Linear(inputs, width), torch.nn.ReLU()]
        inputs = width
    return torch.nn.Sequential(*layers, torch.nn.Linear(inputs, 10))


def curve(width, depth, lr, batch_size, epochs, train, val):
    torch.manual_seed(0)
    net = model(width, depth)
    params = sum(p.numel() for p in net.parameters())
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    order = torch.Generator().manual_seed(0)
    (x, y), (vx, vy) = train, val
    for epoch in range(1, epochs + 1):
        started = time.perf_counter()
        net.train()
        total, seen = 0.0, 0
        for batch in torch.randperm(len(x), generator=order).split(batch_size):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(net(x[batch]), y[batch])
            loss.backward()
            opt.step()
            total += loss.item() * len(batch)
            seen += len(batch)
        net.eval()
        with torch.no_grad():
            logits = net(vx)
            val_loss = torch.nn.functional.cross_entropy(logits, vy).item()
            accuracy = (logits.argmax(1) == vy).float().mean().item()
        yield {"training_iteration": epoch, "val_accuracy": accuracy, "val_loss": val_loss,
               "train_loss": total / seen, "params": params,
               "time_this_iter_s": time.perf_counter() - started}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                      "data", "fashion_mo_curves.csv"))
    parser.add_argument("--epochs", type=int, default=9)
    args = parser.parse_args()
    torch.set_num_threads(1)
    train, val = load()
    columns = ["trial_id", "training_iteration", "val_accuracy", "val_loss", "train_loss",
               "params", "time_this_iter_s", "config/batch_size", "config/depth", "config/lr",
               "config/width"]
    started = time.perf_counter()
    partial = args.out + ".partial"
    with open(partial, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        grid = list(itertools.product(WIDTHS, DEPTHS, LRS, BATCHES))
        for n, (width, depth, lr, batch_size) in enumerate(grid):
            for row in curve(width, depth, lr, batch_size, args.epochs, train, val):
                row.update({"trial_id": f"c{n:03d}", "config/batch_size": batch_size,
                            "config/depth": depth, "config/lr": lr, "config/width": width})
                row["val_accuracy"] = round(row["val_accuracy"], 6)
                for k in ("val_loss", "train_loss", "time_this_iter_s"):
                    row[k] = round(row[k], 6)
                writer.writerow(row)
            f.flush()
            print(f"{n + 1}/{len(grid)} width {width} depth {depth} lr {lr} batch "
                  f"{batch_size}: accuracy "
                  f"{row['val_accuracy']:.4f}, {row['params']} params, "
                  f"{time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    os.replace(partial, args.out)


if __name__ == "__main__":
    main()
