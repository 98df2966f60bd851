#!/usr/bin/python3
"""The Dask peer of `rayd microbenchmark`: the same workloads, under the same metric names.

Runs on Debian's python3-distributed (Dask distributed 2022.12), with Debian's interpreter:

    /usr/bin/python3 bench/peers/dask_bench.py [--runs 3] [--seconds 1] [--json FILE] [--quick]

Prints a table like `rayd microbenchmark` (metric, min/median/max ops/s, GB/s for the
*_gigabytes metrics); --json FILE also writes the same shape of JSON as
`rayd microbenchmark --json` ({"metrics": [{"name", "min", "median", "max"}, ...]}), so that a
script (bench/peers/compare.py) can compare the two key by key. A metric Dask has no equivalent
of has min/median/max null and a "reason"; a metric whose Dask form differs in what it does
has a "note".

The cluster: LocalCluster(processes=True, n_workers=2, threads_per_worker=1). rayd's embedded
cluster has one CPU slot per detected core (2 here) and runs every task and actor in a worker
process apart from the driver, so a task costs a trip to another process; two single-threaded
worker processes are the Dask equivalent. (processes=False would run tasks on threads inside
the driver, skipping the serialization and the network hop that rayd pays, and with the GIL
shared with the client.) As with rayd, the 4 actors of the 1_n/n_n metrics share the 2
workers. Each metric runs a batch repeatedly for about --seconds, --runs times, like rayd's
Rate(): a batch that takes longer than --seconds still runs once in full.

What bounds Dask here: every step of a task or a scatter is a message to or from the scheduler,
and Dask 2022.12 batches those streams on fixed timers (client to scheduler every 10 ms,
scheduler to worker 5 ms, worker to scheduler 2 ms; hard-coded, no config key). A synchronous
round trip therefore costs ~10 ms (~90/s); patching the client's 10 ms to 0 alone took it to
~170/s on this 2-core machine. We measure Dask as shipped, without such patches.

Dask's forms of rayd's operations:
  Task(f).Remote() / Get        client.submit(f, pure=False) / future.result(), client.gather
  Actor(...).Remote(), calls    client.submit(Cls, actor=True).result(); actor.call(x).result()
  max-concurrency actor         an actor whose method is `async def` (runs on the worker's loop)
  Put / Get of a value          client.scatter(v, hash=False) / future.result()
  Put from a worker             get_client().scatter(v, hash=False) inside a task
  Wait(refs, 1)                 distributed.wait(futures, return_when="FIRST_COMPLETED")
"""

import argparse
import json
import logging
import os
import sys
import threading
import time
import warnings

import numpy as np
from distributed import Client, LocalCluster, get_client, wait
import distributed

GIB = 1 << 30


def noop():
    return 0


class Sink:
    def call(self, x):
        return x


class AsyncSink:
    """The max-concurrency actor: Dask runs `async def` actor methods on the worker's event
    loop, concurrently, instead of one at a time on the actor's thread."""

    async def call(self, x):
        return x


def put_array(nbytes, times):
    """multi_client_put_gigabytes: `times` puts of an array of `nbytes` from a worker, each
    dropped at once; the array is made once per worker process, as rayd's PutArray does."""
    global _put_buffer
    if "_put_buffer" not in globals() or _put_buffer.nbytes != nbytes:
        _put_buffer = np.ones(nbytes // 4, dtype=np.float32)
    client = get_client()
    for _ in range(times):
        future = client.scatter(_put_buffer, hash=False)
        del future
    return 0


def make_array(nbytes):
    return np.full(nbytes // 4, 2.0, dtype=np.float32)


def make_refs(n):
    """get_object_containing_10k_refs: a task that puts n small values and returns their refs.
    One scatter of a list (one scheduler message) rather than n scatters: the Dask way."""
    return get_client().scatter(list(range(n)), hash=False)


def rate(batch, seconds):
    """Runs `batch` (which performs that many ops, or moves that many GB) for about `seconds`;
    returns ops/s. The same loop as rayd's Rate()."""
    ops = 0.0
    start = time.perf_counter()
    elapsed = 0.0
    while elapsed < seconds:
        ops += batch()
        elapsed = time.perf_counter() - start
    return ops / elapsed


def settle(client, timeout=30.0):
    """Waits until the scheduler has let go of the keys an earlier metric released (10k of them
    after the 10k-refs metric): that clean-up runs in the background and would otherwise be
    billed to the next metric's first batch. At most 16 keys may stay (the futures held)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        on_workers = client.run(lambda dask_worker: len(dask_worker.state.tasks))
        if (client.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.tasks)) <= 16
                and sum(on_workers.values()) <= 16):
            return
        time.sleep(0.05)


def run_threads(n, fn):
    threads = [threading.Thread(target=fn, args=(c,)) for c in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def run_suite(client, runs, seconds, quick):
    metrics = []

    def measure(name, batch, note=None):
        settle(client)
        values = [rate(batch, seconds) for _ in range(runs)]
        metric = {"name": name, "runs": values}
        if note:
            metric["note"] = note
        metrics.append(metric)
        print(f"  {name} done", file=sys.stderr, flush=True)

    def unsupported(name, reason):
        metrics.append({"name": name, "runs": [], "reason": reason})
        print(f"  {name}: no Dask equivalent", file=sys.stderr, flush=True)

    def tasks_sync():
        client.submit(noop, pure=False).result()
        return 1.0

    def tasks_async():
        futures = [client.submit(noop, pure=False) for _ in range(1000)]
        client.gather(futures)
        return 1000.0

    def multi_client_tasks_async():
        # Four threads of one client, as rayd's four threads of one driver.
        def one(_):
            futures = [client.submit(noop, pure=False) for _ in range(250)]
            client.gather(futures)

        run_threads(4, one)
        return 1000.0

    measure("single_client_tasks_sync", tasks_sync)
    measure("single_client_tasks_async", tasks_async)
    measure("multi_client_tasks_async", multi_client_tasks_async)

    actor = client.submit(Sink, actor=True, pure=False).result()
    actor.call(0).result()

    def actor_sync():
        actor.call(1).result()
        return 1.0

    def actor_async():
        futures = [actor.call(i) for i in range(1000)]
        for f in futures:
            f.result()
        return 1000.0

    measure("1_1_actor_calls_sync", actor_sync)
    measure("1_1_actor_calls_async", actor_async)

    concurrent = client.submit(AsyncSink, actor=True, pure=False).result()
    concurrent.call(0).result()

    def actor_concurrent():
        futures = [concurrent.call(i) for i in range(1000)]
        for f in futures:
            f.result()
        return 1000.0

    measure("1_1_actor_calls_concurrent", actor_concurrent,
            note="an actor with an async def method (Dask has no max_concurrency)")

    actors = [client.submit(Sink, actor=True, pure=False) for _ in range(4)]
    actors = [a.result() for a in actors]
    for a in actors:
        a.call(0).result()

    def one_n():
        futures = [actors[i % 4].call(i) for i in range(1000)]
        for f in futures:
            f.result()
        return 1000.0

    def n_n():
        def one(c):
            futures = [actors[c].call(i) for i in range(250)]
            for f in futures:
                f.result()

        run_threads(4, one)
        return 1000.0

    measure("1_n_actor_calls_async", one_n)
    measure("n_n_actor_calls_async", n_n)
    actor = concurrent = actors = None  # released, as rayd kills its actors here

    small = client.scatter(42, hash=False)

    def get_calls():
        for _ in range(100):
            small.result()
        return 100.0

    def put_calls():
        for i in range(100):
            f = client.scatter(i, hash=False)
            del f
        return 100.0

    measure("single_client_get_calls", get_calls,
            note="each result() fetches the value from the worker that holds it")
    measure("single_client_put_calls", put_calls,
            note="each scatter() sends the value to a worker and waits for the scheduler")
    small = None

    unsupported("placement_group_create_removal",
                "Dask has no placement groups (no gang reservation of resources)")

    def wait_1k_refs():
        # Ray's single_client_wait_1k_refs: 1000 small tasks, then wait on what is not ready
        # until none is left. Ray's wait returns one ref per call (num_returns=1); Dask's
        # FIRST_COMPLETED returns every finished one, so this loop makes fewer calls. (Taking
        # one at a time costs Dask ~10 ms per call over 1000 futures: over 10 s per op.)
        not_ready = [client.submit(noop, pure=False) for _ in range(1000)]
        while not_ready:
            _, not_ready = wait(not_ready, return_when="FIRST_COMPLETED")
        return 1.0

    measure("single_client_wait_1k_refs", wait_1k_refs,
            note="1 op = submit 1000 tasks, then wait(FIRST_COMPLETED) until none is left; "
                 "Dask returns all finished futures per call, Ray one")

    def get_containing_10k_refs():
        # Ray's single_client_get_object_containing_10k_refs: 1 op = a task that puts 10k
        # values and returns their refs, and a get of that result.
        refs = client.submit(make_refs, 10000, pure=False).result()
        assert len(refs) == 10000
        del refs
        return 1.0

    measure("single_client_get_object_containing_10k_refs", get_containing_10k_refs,
            note="the task puts the 10k values with one scatter of a list")

    big_bytes = (GIB // 64) if quick else (GIB // 4)  # rayd: 256 MiB
    big = np.full(big_bytes // 4, 3.0, dtype=np.float32)

    def put_gigabytes():
        f = client.scatter(big, hash=False)
        del f
        return big.nbytes / 1e9

    measure("single_client_put_gigabytes", put_gigabytes,
            note="scatter sends the array over TCP to a worker process")

    def multi_put_gigabytes():
        futures = [client.submit(put_array, big_bytes, 4, pure=False) for _ in range(4)]
        client.gather(futures)
        return 4 * 4 * big_bytes / 1e9

    measure("multi_client_put_gigabytes", multi_put_gigabytes,
            note="a scatter inside a task stores a reference in that worker's memory: no copy")

    medium = client.scatter(np.ones(1 << 18, dtype=np.float32), hash=False)  # 1 MiB

    def get_calls_store():
        for _ in range(100):
            medium.result()
        return 100.0

    one_mib = np.ones(1 << 18, dtype=np.float32)

    def put_calls_store():
        for _ in range(100):
            f = client.scatter(one_mib, hash=False)
            del f
        return 100.0

    measure("single_client_get_calls_store", get_calls_store,
            note="each result() copies the 1 MiB array from the worker over TCP")
    measure("single_client_put_calls_store", put_calls_store)
    medium = None

    # rayd's cross-node get: a task on another node makes a 1 GiB array; the driver reads it.
    # Every Dask worker is another process reached over TCP, so a task on any worker will do.
    cross_bytes = (GIB // 16) if quick else GIB
    settle(client)
    gbps = []
    for _ in range(runs):
        ref = client.submit(make_array, cross_bytes, pure=False)
        wait([ref])
        start = time.perf_counter()
        value = ref.result()
        s = time.perf_counter() - start
        if value.nbytes == cross_bytes:
            gbps.append(cross_bytes / s / 1e9)
        del ref, value
    metrics.append({"name": "cross_node_get_gigabytes", "runs": gbps,
                    "note": "client.result() of an array made by a task on a worker process"})
    return metrics


def summarize(metrics):
    out = []
    for m in metrics:
        values = sorted(m.pop("runs"))
        if values:
            m.update(min=values[0], median=values[len(values) // 2], max=values[-1])
        else:
            m.update(min=None, median=None, max=None)
        out.append(m)
    return out


def print_table(result):
    print(f"dask distributed {result['dask_version']}: {result['cluster']}\n")
    print(f"{'metric':<46}{'min/s':>14}{'median/s':>14}{'max/s':>14}")
    for m in result["metrics"]:
        if m["median"] is None:
            print(f"{m['name']:<46}{'-':>14}{'-':>14}{'-':>14}  ({m.get('reason', 'no runs')})")
            continue
        digits = 2 if m["median"] < 100 else 0
        print(f"{m['name']:<46}" + "".join(
            f"{m[k]:>14.{digits}f}" for k in ("min", "median", "max")))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per metric (default 3)")
    parser.add_argument("--seconds", type=float, default=1.0, help="seconds per run (default 1)")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON to FILE")
    parser.add_argument("--quick", action="store_true",
                        help="1 run of 0.2 s per metric, smaller arrays: for development")
    args = parser.parse_args()
    if args.quick:
        args.runs, args.seconds = 1, 0.2

    warnings.filterwarnings("ignore")
    logging.getLogger("distributed").setLevel(logging.ERROR)
    # See the module docstring: 2 worker processes of 1 thread, like rayd's 2 CPU slots.
    n_workers = int(os.environ.get("DASK_BENCH_WORKERS", os.cpu_count() or 2))
    cluster = LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                           dashboard_address=None, silence_logs=logging.ERROR)
    client = Client(cluster)
    print(f"running the suite ({args.runs} runs of {args.seconds} s per metric) on "
          f"{n_workers} worker processes x 1 thread...", file=sys.stderr, flush=True)
    try:
        metrics = run_suite(client, args.runs, args.seconds, args.quick)
    finally:
        client.close()
        cluster.close()
    result = {
        "peer": "dask",
        "dask_version": distributed.__version__,
        "cluster": f"LocalCluster(processes=True, n_workers={n_workers}, threads_per_worker=1)",
        "runs": args.runs,
        "seconds": args.seconds,
        "quick": args.quick,
        "metrics": summarize(metrics),
    }
    print_table(result)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
