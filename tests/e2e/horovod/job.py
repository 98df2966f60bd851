"""A small Horovod job for tests/e2e/horovod_test.cc and tests/fault's 2-host scenario.

Prints where Horovod put this rank ("PLACE rank=... local=r/n cross=r/n host=..."), checks
that an allreduce over the ranks adds up, and reports it through rayd. Config keys:
  inits: how many times to run hvd.init() ... hvd.shutdown() in this process (1)
  never_init_rank: this rank never calls hvd.init(); it waits to be stopped (-1: none)
"""

import os
import sys
import time

import horovod.torch as hvd
import torch

import rayd.train as rt

config = rt.get_config()
inits = int(config.get("inits", 1))
if int(os.environ["HOROVOD_RANK"]) == int(config.get("never_init_rank", -1)):
    print("not joining the rendezvous", flush=True)
    time.sleep(600)
    sys.exit(0)

for attempt in range(inits):
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    print(f"PLACE rank={rank}/{size} local={hvd.local_rank()}/{hvd.local_size()} "
          f"cross={hvd.cross_rank()}/{hvd.cross_size()} host={os.environ['HOROVOD_HOSTNAME']} "
          f"init={attempt + 1}", flush=True)
    total = hvd.allreduce(torch.tensor([float(rank + 1)]), op=hvd.Sum, name=f"sum{attempt}")
    expected = size * (size + 1) / 2
    if total.item() != expected:
        sys.exit(f"allreduce gave {total.item()}, expected {expected}")
    hvd.shutdown()
rt.report({"size": size, "sum": total.item(), "inits": inits})
