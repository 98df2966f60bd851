"""The Python command trial of bench/data/first_batch.cc: a rank's process that imports what a
PyTorch trial imports, takes its shard of the run's `train` dataset, waits for the first batch
(as torch tensors), writes when it came, and stops. Config: batch_size, stamp_dir.

Its `loop_start` is the process's own start (exec, from /proc), so the interpreter's start and
`import torch` count in the interval that follows it.
"""
import json
import os
import time


def process_start_unix():
    with open("/proc/self/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = int(fields[19])  # field 22, starttime, in clock ticks since boot
    # Measured back from now on the boot clock: /proc/stat's btime is whole seconds (and moves
    # with clock adjustments), which would put up to a second's error in every interval.
    since_start = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    return time.time() - since_start


def main():
    loop_start = process_start_unix()
    import numpy  # noqa: F401  (as a trial would)
    import torch
    import rayd.train as rt

    imported = time.time()
    config = rt.get_config()
    shard = rt.get_dataset_shard("train")
    opened = time.time()
    batch = next(iter(shard.iter_batches(batch_size=config.get("batch_size", 64), epoch=0,
                                         batch_format="torch")))
    first_batch = time.time()
    rank = rt.get_context().world_rank
    with open(os.path.join(config["stamp_dir"], f"rank{rank}.json"), "w") as f:
        json.dump({"loop_start": loop_start, "imported": imported, "opened": opened,
                   "first_batch": first_batch,
                   "rows": int(batch["label"].shape[0]), "torch": torch.__version__}, f)
    rt.report({"first_batch_rows": float(batch["label"].shape[0])})


if __name__ == "__main__":
    main()
