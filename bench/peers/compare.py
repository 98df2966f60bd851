#!/usr/bin/python3
"""Runs rayd's benchmarks and their peers' in one go and prints one table of ratios.

Pairs (a pair is skipped, with a message, when its rayd binary is not built or its peer's
Python packages are missing; scripts/install-deps.sh --peers installs them):

  micro  $RAYD_BUILD_DIR/cli/rayd microbenchmark --json   vs  dask_bench.py --json FILE
  train  $RAYD_BUILD_DIR/bench/train_bench                vs  torch_ddp.py --json
  tune   $RAYD_BUILD_DIR/bench/tune_bench                 vs  optuna_sweep.py --json

train_bench and tune_bench print text only, so their summary lines are parsed here; a line
that is not found leaves that figure empty (with a warning) rather than stopping the run.

The ratio is always rayd's speed over the peer's: for a rate (ops/s, GB/s, samples/s) it is
rayd / peer, for a time (seconds, ms) peer / rayd. Above 1 means rayd is faster. Figures are
medians where the benchmark gives several runs. Nothing is asserted: the figures are printed,
and with --json FILE written with every benchmark's raw output.

Usually run through bench/compare.sh; directly:

    RAYD_BUILD_DIR=build /usr/bin/python3 bench/peers/compare.py [--quick] [--json FILE]
"""

import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PEER_PYTHON = "/usr/bin/python3"  # Debian's interpreter, which sees Debian's packages
TIMEOUT_S = 900


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def run(cmd, what):
    """Runs `cmd`; returns its stdout, or None (with a message) when it fails."""
    log(f"== {what}: {' '.join(cmd)}")
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        log(f"   {what} ran past {TIMEOUT_S} s; left out")
        return None
    except OSError as e:
        log(f"   {what} could not start: {e}")
        return None
    if p.returncode != 0:
        log(f"   {what} exited {p.returncode}; left out. Last of its stderr:\n"
            + "\n".join(p.stderr.splitlines()[-10:]))
        return None
    return p.stdout


def peer_has(modules):
    """True when Debian's python can import all of `modules`."""
    code = "import " + ", ".join(modules)
    return subprocess.run([PEER_PYTHON, "-c", code], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode == 0


def can_run(pair, binary, modules, peer, package, skipped):
    """True when `binary` is built and Debian's python has the peer's `modules`; else the reason
    goes to `skipped`."""
    if not os.access(binary, os.X_OK):
        skipped.append(f"{pair}: {binary} is not built")
        return False
    if not peer_has(modules):
        skipped.append(f"{pair}: {peer} is missing ({package}; scripts/install-deps.sh --peers)")
        return False
    return True


def load_json_from(text):
    """The JSON object in `text`. `rayd microbenchmark --json` can have other lines before it
    (the second node it starts for the cross-node get prints to the same stdout)."""
    start = text.find("\n{") + 1 if not text.startswith("{") else 0
    return json.JSONDecoder().raw_decode(text[start:])[0]


def row(pair, workload, unit, ours, theirs, higher_is_better=True, note=""):
    ratio = None
    if ours is not None and theirs is not None and higher_is_better is not None:
        if ours > 0 and theirs > 0:
            ratio = ours / theirs if higher_is_better else theirs / ours
    return {"pair": pair, "workload": workload, "unit": unit, "rayd": ours, "peer": theirs,
            "ratio": ratio, "higher_is_better": higher_is_better, "note": note}


def search(pattern, text, what, group=1):
    m = re.search(pattern, text, re.MULTILINE)
    if not m:
        log(f"   warning: no '{what}' line in the output; left empty")
        return None
    return float(m.group(group))


# --- micro: rayd microbenchmark vs dask_bench.py ------------------------------------------


# What rayd's side of a micro metric does differently, where it matters for the ratio.
RAYD_NOTES = {
    "single_client_get_calls": "rayd: a value under 100 KiB stays in the driver's memory",
    "single_client_put_calls": "rayd: a value under 100 KiB stays in the driver's memory",
}


def pair_micro(build, quick, raw, skipped):
    rayd = os.path.join(build, "cli", "rayd")
    if not can_run("micro", rayd, ["distributed", "numpy"], "Dask", "python3-distributed",
                   skipped):
        return []
    args = ["--runs", "1", "--seconds", "0.2"] if quick else []
    out = run([rayd, "microbenchmark", "--json", *args], "rayd microbenchmark")
    ours = load_json_from(out) if out else None
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        args = ["--quick"] if quick else []
        done = run([PEER_PYTHON, os.path.join(HERE, "dask_bench.py"), "--json", f.name, *args],
                   "dask_bench.py")
        theirs = json.load(open(f.name)) if done is not None else None
    raw["rayd_microbenchmark"] = ours
    raw["dask_bench"] = theirs
    if ours is None or theirs is None:
        skipped.append("micro: a side failed (see above)")
        return []
    mine = {m["name"]: m for m in ours["metrics"]}
    peer = {m["name"]: m for m in theirs["metrics"]}
    rows = []
    for name in list(mine) + [n for n in peer if n not in mine]:
        p = peer.get(name, {})
        note = "; ".join(n for n in (RAYD_NOTES.get(name), p.get("reason") or p.get("note"))
                         if n)
        if name not in mine:
            note = "not in rayd microbenchmark" + (f"; {note}" if note else "")
        if name not in peer:
            note = "not in dask_bench.py"
        unit = "GB/s" if name.endswith("gigabytes") else "ops/s"
        rows.append(row("micro", name, unit, mine.get(name, {}).get("median"), p.get("median"),
                        note=note))
    return rows


# --- train: train_bench vs torch_ddp.py ----------------------------------------------------


def pair_train(build, quick, raw, skipped):
    ours_bin = os.path.join(build, "bench", "train_bench")
    if not can_run("train", ours_bin, ["torch"], "Python torch", "python3-torch", skipped):
        return []
    steps, iters = ("40", "3") if quick else (None, None)
    ours = run([ours_bin] + (["--steps", steps, "--iters", iters] if quick else []),
               "train_bench")
    theirs_out = run([PEER_PYTHON, os.path.join(HERE, "torch_ddp.py"), "--json"]
                     + (["--steps", steps, "--allreduce-iters", iters] if quick else []),
                     "torch_ddp.py")
    theirs = load_json_from(theirs_out) if theirs_out else None
    raw["train_bench_stdout"] = ours
    raw["torch_ddp"] = theirs
    if ours is None or theirs is None:
        skipped.append("train: a side failed (see above)")
        return []
    mib25_gb = 25 * 1.048576e-3  # train_bench all-reduces 25 MiB; torch_ddp.py 25 MB: use GB/s
    bucketed_ms = search(r"DDP bucketed\s+([\d.]+) ms", ours, "DDP bucketed")
    return [
        row("train", "mlp_samples_per_s_1_rank", "samples/s",
            search(r"^mlp 1 rank, plain LibTorch\s+([\d.]+) samples/s", ours, "plain LibTorch"),
            theirs["samples_per_s_1_rank"], note="plain LibTorch vs plain Python torch"),
        row("train", "mlp_samples_per_s_2_ranks_ddp_gloo", "samples/s",
            search(r"^mlp 2 rank\(s\), DDP over Gloo\s+([\d.]+) samples/s", ours, "2 rank DDP"),
            theirs["samples_per_s_2_ranks_ddp_gloo"]),
        row("train", "allreduce_25MB_raw_gloo", "GB/s",
            search(r"raw c10d Gloo\s+[\d.]+ ms\s+([\d.]+) GB/s", ours, "raw c10d Gloo"),
            theirs["allreduce_25MB_GBps"],
            note="both raw c10d Gloo; rayd 25 MiB, torch 25 MB, so GB/s"),
        row("train", "allreduce_25MB_ddp_bucketed", "GB/s",
            mib25_gb / (bucketed_ms / 1e3) if bucketed_ms else None,
            theirs["allreduce_25MB_GBps"],
            note="rayd: backward + bucketed all-reduce; torch: the raw all-reduce alone"),
    ]


# --- tune: tune_bench vs optuna_sweep.py ---------------------------------------------------


def pair_tune(build, quick, raw, skipped):
    ours_bin = os.path.join(build, "bench", "tune_bench")
    if not can_run("tune", ours_bin, ["optuna"], "Optuna", "python3-optuna", skipped):
        return []
    ours = run([ours_bin] + (["--results", "5000", "--trials", "1000", "--seeds", "1"]
                             if quick else []), "tune_bench")
    theirs_out = run([PEER_PYTHON, os.path.join(HERE, "optuna_sweep.py"), "--json"]
                     + (["--trials", "1000", "--reports", "5000"] if quick else []),
                     "optuna_sweep.py")
    theirs = load_json_from(theirs_out) if theirs_out else None
    raw["tune_bench_stdout"] = ours
    raw["optuna_sweep"] = theirs
    if ours is None or theirs is None:
        skipped.append("tune: a side failed (see above)")
        return []
    rows = [
        row("tune", "results_per_s", "results/s",
            search(r"^results/s\s+([\d.]+) results/s", ours, "results/s"),
            theirs["reports_per_s"],
            note="rayd: Tuner with logging, 2 trials at once; optuna: trial.report, in memory"),
        row("tune", "one_result_trials_per_s", "trials/s",
            search(r"^one-result trials\s+([\d.]+) trials/s", ours, "one-result trials"),
            theirs["trials_per_s"],
            note="rayd: a trial is a task on the cluster; optuna: a function call in-process"),
        row("tune", "one_result_trials_reused_gangs_per_s", "trials/s",
            search(r"^one-result trials, reused gangs\s+([\d.]+) trials/s", ours,
                   "one-result trials, reused gangs"),
            theirs["trials_per_s"],
            note="rayd: the trials after each slot's first (which starts its gang); optuna: all"),
    ]
    for mine, peer in (("fifo", "fifo"), ("asha", "sha"), ("hyperband", "hyperband")):
        pattern = rf"^\s+{mine}\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$"
        rows.append(row("tune", f"sweep_{mine}_seconds", "s",
                        search(pattern, ours, f"sweep {mine}", 3),
                        theirs["sweep"][peer]["seconds"], higher_is_better=False,
                        note=f"27 trials x 9 iterations; optuna {peer}"))
        rows.append(row("tune", f"sweep_{mine}_budget", "iterations",
                        search(pattern, ours, f"sweep {mine}", 1),
                        theirs["sweep"][peer]["budget"], higher_is_better=None,
                        note="iterations run, not a speed; seeds differ"))
    return rows


# --- output --------------------------------------------------------------------------------


def fmt(v):
    if v is None:
        return "-"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    return f"{v:.3g}" if abs(v) < 1 else f"{v:.2f}"


def print_table(rows, machine):
    print(f"\nrayd vs peers on {machine['host']} ({machine['cpus']} CPUs), "
          f"load average {machine['loadavg_start']} at start, {machine['loadavg_end']} at end")
    if machine.get("rayd_limits"):
        lim = machine["rayd_limits"]
        print(f"machine limits (rayd microbenchmark): loopback round trip "
              f"{lim['loopback_round_trip_us']:.1f} us, memcpy {lim['memcpy_gb_per_s']:.1f} GB/s")
    print("ratio = rayd speed / peer speed (rayd/peer for rates, peer/rayd for times): "
          "above 1 = rayd faster\n")
    width = max([len(r["workload"]) for r in rows] + [8]) + 2
    print(f"{'pair':<6} {'workload':<{width}}{'unit':<11}{'rayd':>13}{'peer':>13}{'ratio':>11}"
          f"  note")
    for r in rows:
        ratio = "-" if r["ratio"] is None else (
            f"{r['ratio']:,.0f}x" if r["ratio"] >= 100 else f"{r['ratio']:.2f}x")
        print(f"{r['pair']:<6} {r['workload']:<{width}}{r['unit']:<11}{fmt(r['rayd']):>13}"
              f"{fmt(r['peer']):>13}{ratio:>11}  {r['note']}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", metavar="FILE", help="write all results to FILE")
    parser.add_argument("--quick", action="store_true", help="small counts, for development")
    parser.add_argument("--pairs", default="micro,train,tune",
                        help="comma-separated subset of micro,train,tune (default all)")
    args = parser.parse_args()
    build = os.environ.get("RAYD_BUILD_DIR", "build")
    machine = {"host": platform.node(), "cpus": os.cpu_count(),
               "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "loadavg_start": " ".join(open("/proc/loadavg").read().split()[:3])}
    raw, skipped, rows = {}, [], []
    runners = {"micro": pair_micro, "train": pair_train, "tune": pair_tune}
    for name in args.pairs.split(","):
        rows += runners[name.strip()](build, args.quick, raw, skipped)
    machine["loadavg_end"] = " ".join(open("/proc/loadavg").read().split()[:3])
    if raw.get("rayd_microbenchmark"):
        m = raw["rayd_microbenchmark"]
        machine["rayd_limits"] = {k: m[k] for k in ("loopback_round_trip_us", "memcpy_gb_per_s")}
    print_table(rows, machine)
    for s in skipped:
        print(f"skipped {s}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine, "build_dir": build, "quick": args.quick,
                       "rows": rows, "skipped": skipped, "raw": raw}, f, indent=2)
            f.write("\n")
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
