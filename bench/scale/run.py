#!/usr/bin/python3
"""How the head's cost grows with cluster size and with the number of trials.

Sweeps the number of simulated nodes through bench/gcs_heartbeat_bench (head CPU while N nodes
heartbeat) and bench/placement_bench (actors and placement groups placed per second by a real
head with N simulated node daemons), and the number of one-result trials through
bench/tune_bench (the Tuner's trials/s and cost per trial). Every figure goes to
bench/scale/results.json, with the machine it ran on, and the curves to bench/scale/scale.png.

    RAYD_BUILD_DIR=build /usr/bin/python3 bench/scale/run.py [--quick] [--out DIR]

Runs are sequential: on a 2-core machine a second benchmark in parallel would skew both. A run
that fails, times out or misses nodes is recorded with its error output, not dropped.
matplotlib comes from Debian's python3-matplotlib (scripts/install-deps.sh --peers).
"""

import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

FULL = {
    "heartbeat_nodes": [100, 250, 500, 1000, 2000, 5000, 10000],
    "heartbeat_seconds": 10,
    "placement_nodes": [100, 250, 500, 1000, 2000, 4000],
    "placement_actors": 1000,
    "placement_groups": 1000,
    "placement_repeats": 2,
    "tune_trials": [100, 300, 1000, 3000, 10000],
    "tune_results": 5000,
}
QUICK = {
    "heartbeat_nodes": [100, 500, 1000],
    "heartbeat_seconds": 5,
    "placement_nodes": [100, 500, 1000],
    "placement_actors": 500,
    "placement_groups": 500,
    "placement_repeats": 1,
    "tune_trials": [100, 300],
    "tune_results": 1000,
}

# A run whose head could not start (it shares the machine with whatever else runs) is retried.
QUIET_WAIT_S = 90
START_FAILURE = "could not start the head"
ATTEMPTS = 5


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def busy_cores(seconds=1.0):
    """Cores busy over `seconds`, from /proc/stat: what else loads the machine before a run."""
    def sample():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return sum(v), v[3] + v[4]  # total, idle + iowait
    t0, i0 = sample()
    time.sleep(seconds)
    t1, i1 = sample()
    return round((1 - (i1 - i0) / max(1, t1 - t0)) * (os.cpu_count() or 1), 2)


def run_bench(argv, timeout):
    """Runs argv; returns (stdout, record) where record holds the command and any failure."""
    # Waits (a while) for whatever else runs to finish: on 2 cores a compile skews every figure.
    deadline = time.monotonic() + QUIET_WAIT_S
    busy = busy_cores()
    while busy > 0.3 and time.monotonic() < deadline:
        busy = busy_cores(2.0)
    record = {"command": " ".join(argv), "busy_cores_before": busy}
    if record["busy_cores_before"] > 0.3:
        log(f"  warning: {record['busy_cores_before']} cores busy before this run; "
            "figures are skewed by whatever else runs")
    for attempt in range(1, ATTEMPTS + 1):
        t0 = time.monotonic()
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
        except subprocess.TimeoutExpired as e:
            record.update(error=f"timed out after {timeout} s",
                          stderr_tail=(e.stderr or b"")[-2000:].decode(errors="replace")
                          if isinstance(e.stderr, bytes) else (e.stderr or "")[-2000:],
                          stdout=(e.stdout or b"").decode(errors="replace")
                          if isinstance(e.stdout, bytes) else (e.stdout or ""))
            return None, record
        record["wall_s"] = round(time.monotonic() - t0, 2)
        record["attempts"] = attempt
        if p.returncode != 0 and START_FAILURE in p.stderr and attempt < ATTEMPTS:
            time.sleep(0.5)
            continue
        if p.returncode != 0:
            record.update(error=f"exit status {p.returncode}", stderr_tail=p.stderr[-2000:],
                          stdout=p.stdout)
            return None, record
        if p.stderr.strip():
            record["stderr_tail"] = p.stderr[-2000:]
        return p.stdout, record
    return None, record


def number(pattern, text):
    m = re.search(pattern, text)
    return float(m.group(1)) if m else None


def heartbeat(binary, nodes, seconds):
    out, rec = run_bench([binary, str(nodes), str(seconds), "1000"], timeout=seconds + 150)
    rec["nodes"] = nodes
    rec["period_ms"] = 1000
    if out is None:
        return rec
    rec["window_s"] = number(r"window: ([\d.]+) s", out)
    rec["heartbeats"] = number(r"heartbeats answered: (\d+)", out)
    rec["heartbeats_per_s"] = number(r"heartbeats answered: \d+ \(([\d.]+)/s\)", out)
    rec["failed"] = number(r"failed: (\d+)", out)
    rec["head_cpu_s"] = number(r"head CPU: ([\d.]+) s", out)
    rec["head_cpu_pct"] = number(r"= ([\d.]+)% of one core", out)
    rec["us_per_heartbeat"] = number(r"\(([\d.]+) us per heartbeat\)", out)
    # A node that did not register still heartbeats and fails: recorded, not hidden.
    rec["stdout"] = out
    return rec


PLACEMENT_FIGURES = ("actors_per_s", "pg_create_removal_per_s", "pg_strict_spread_4_per_s",
                     "pg_pipelined_per_s")


def placement(binary, nodes, actors, groups):
    out, rec = run_bench([binary, str(nodes), str(actors), str(groups)], timeout=600)
    rec["nodes"] = nodes
    if out is None:
        return rec
    rec["actors_alive"] = number(r"actors_placed: (\d+) of", out)
    rec["actors_per_s"] = number(r"actors_placed: .* = ([\d.]+) actors/s", out)
    rec["pg_create_removal_per_s"] = number(r"pg_create_removal \(1 bundle.* = ([\d.]+)/s", out)
    rec["pg_strict_spread_4_per_s"] = number(r"pg_create_removal \(4 bundles.* = ([\d.]+)/s", out)
    rec["pg_pipelined_created"] = number(r"pg_pipelined.*: (\d+) of", out)
    rec["pg_pipelined_per_s"] = number(r"pg_pipelined.* = ([\d.]+)/s", out)
    rec["failures"] = "FAILURES" in out
    rec["stdout"] = out
    return rec


def tune(binary, trials, results):
    out, rec = run_bench([binary, "--trials", str(trials), "--results", str(results),
                          "--seeds", "0"], timeout=600)
    rec["trials"] = trials
    if out is None:
        return rec
    rec["cpus"] = number(r"embedded cluster \((\d+) CPUs\)", out)
    rec["results_per_s"] = number(r"results/s\s+([\d.]+) results/s", out)
    rec["trials_per_s"] = number(r"one-result trials\s+([\d.]+) trials/s", out)
    rec["trials_seconds"] = number(r"trials in ([\d.]+) s;", out)
    rec["ms_per_trial_per_slot"] = number(r"([\d.]+) ms per trial per slot", out)
    # The synthetic sweep is skipped (--seeds 0); its lines are dropped from the record.
    rec["stdout"] = out.split("\nSynthetic sweep")[0]
    return rec


def machine():
    def cmd(*argv):
        try:
            return subprocess.run(argv, capture_output=True, text=True, cwd=ROOT).stdout.strip()
        except OSError:
            return None
    cpu = None
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), None)
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "kernel": platform.release(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "git_rev": cmd("git", "rev-parse", "HEAD"),
        "git_dirty": bool(cmd("git", "status", "--porcelain", "--untracked-files=no")),
        "fd_limit": int(cmd("sh", "-c", "ulimit -n") or 0) or None,
    }


def plot(data, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b, c) = plt.subplots(1, 3, figsize=(17, 5.2))
    nproc = data["machine"]["nproc"]
    fig.suptitle(f"rayd head cost vs cluster size and trials ({nproc} cores, "
                 f"{data['machine']['date'][:10]}, {(data['machine']['git_rev'] or '')[:9]})")

    hb = [r for r in data["heartbeat"] if r.get("head_cpu_pct") is not None]
    if hb:
        xs = [r["nodes"] for r in hb]
        a.plot(xs, [r["head_cpu_pct"] for r in hb], "o-", label="head CPU, % of one core")
        a.set_xscale("log")
        a.set_xlabel("simulated nodes heartbeating (1 s period)")
        a.set_ylabel("head CPU (% of one core)")
        a2 = a.twinx()
        a2.plot(xs, [r["us_per_heartbeat"] for r in hb], "s--", color="tab:gray",
                label="head CPU per heartbeat (µs)")
        a2.set_ylabel("head CPU per heartbeat (µs)", color="tab:gray")
        a2.set_ylim(bottom=0)
        a.set_ylim(bottom=0)
        lines = a.get_legend_handles_labels()
        lines2 = a2.get_legend_handles_labels()
        a.legend(lines[0] + lines2[0], lines[1] + lines2[1], loc="upper left", fontsize=8)
    a.set_title("(a) head CPU vs nodes heartbeating")
    a.grid(True, which="both", alpha=0.3)

    pl = [r for r in data["placement"] if r.get("actors_per_s") is not None]
    for key, label in [("actors_per_s", "actors placed/s (1,000 at once)"),
                       ("pg_create_removal_per_s", "PG create+remove/s (1 bundle, sequential)"),
                       ("pg_strict_spread_4_per_s", "PG create+remove/s (4 STRICT_SPREAD)"),
                       ("pg_pipelined_per_s", "PGs created/s (4 SPREAD, pipelined)")]:
        pts = [(r["nodes"], r[key]) for r in pl if r.get(key)]
        if pts:
            b.plot(*zip(*pts), "o-", label=label)
    b.set_xscale("log")
    b.set_yscale("log")
    b.set_xlabel("simulated nodes")
    b.set_ylabel("operations per second")
    b.set_title("(b) placement throughput vs nodes")
    b.grid(True, which="both", alpha=0.3)
    b.legend(fontsize=8)

    tu = [r for r in data["tune"] if r.get("trials_per_s") is not None]
    if tu:
        xs = [r["trials"] for r in tu]
        c.plot(xs, [r["trials_per_s"] for r in tu], "o-", label="one-result trials/s")
        c.set_xscale("log")
        c.set_xlabel("number of trials in the sweep")
        c.set_ylabel("trials per second")
        c.set_ylim(bottom=0)
        c2 = c.twinx()
        c2.plot(xs, [r["ms_per_trial_per_slot"] for r in tu], "s--", color="tab:gray",
                label="ms per trial per CPU slot")
        c2.set_ylabel("ms per trial per CPU slot", color="tab:gray")
        c2.set_ylim(bottom=0)
        lines = c.get_legend_handles_labels()
        lines2 = c2.get_legend_handles_labels()
        c.legend(lines[0] + lines2[0], lines[1] + lines2[1], loc="lower right", fontsize=8)
    c.set_title("(c) Tuner: one-result trials vs sweep size")
    c.grid(True, which="both", alpha=0.3)

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    log(f"scale: wrote {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (about a minute)")
    ap.add_argument("--out", default=HERE, help="where results.json and scale.png go")
    ap.add_argument("--plot-only", action="store_true",
                    help="redraw scale.png from an existing results.json")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    json_path = os.path.join(args.out, "results.json")
    png_path = os.path.join(args.out, "scale.png")
    if args.plot_only:
        with open(json_path) as f:
            plot(json.load(f), png_path)
        return 0

    build = os.environ.get("RAYD_BUILD_DIR", "build")
    bench_dir = os.path.join(build if os.path.isabs(build) else os.path.join(ROOT, build), "bench")
    binaries = {n: os.path.join(bench_dir, n)
                for n in ("gcs_heartbeat_bench", "placement_bench", "tune_bench")}
    # The test command's build leaves bench/ out: build them first (bench/build.sh).
    subprocess.run([os.path.join(ROOT, "bench", "build.sh"), *binaries],
                   env={**os.environ, "RAYD_BUILD_DIR": build}, cwd=ROOT, check=False)
    missing = [p for p in binaries.values() if not os.access(p, os.X_OK)]
    if missing:
        log("scale: not built: " + ", ".join(missing))
        return 2
    # A rebuild during the sweep would mix two builds (or fail with half-written libraries).
    watched = dict(binaries)
    for rel in ("cli/rayd", "runtime/librayd_runtime.so"):
        if os.path.exists(os.path.join(bench_dir, "..", rel)):
            watched[rel] = os.path.join(bench_dir, "..", rel)

    def stamps():
        return {n: os.path.getmtime(p) for n, p in watched.items()}
    built = stamps()
    sizes = QUICK if args.quick else FULL
    data = {"machine": machine(), "build_dir": build,
            "binaries_mtime": {n: datetime.datetime.fromtimestamp(t, datetime.timezone.utc)
                               .isoformat(timespec="seconds") for n, t in built.items()}, "quick": args.quick, "sizes": sizes,
            "heartbeat": [], "placement": [], "tune": []}

    def save():
        with open(json_path, "w") as f:
            json.dump(data, f, indent=1)

    for n in sizes["heartbeat_nodes"]:
        log(f"scale: gcs_heartbeat_bench {n} nodes, {sizes['heartbeat_seconds']} s")
        r = heartbeat(binaries["gcs_heartbeat_bench"], n, sizes["heartbeat_seconds"])
        log(f"  -> {r.get('head_cpu_pct')}% head CPU, {r.get('us_per_heartbeat')} us/heartbeat"
            + (f"  FAILED: {r['error']}" if "error" in r else ""))
        data["heartbeat"].append(r)
        save()
    for n in sizes["placement_nodes"]:
        log(f"scale: placement_bench {n} nodes")
        # Repeated, and the best of each figure kept: contention only ever lowers them.
        runs = [placement(binaries["placement_bench"], n, sizes["placement_actors"],
                          sizes["placement_groups"]) for _ in range(sizes["placement_repeats"])]
        r = dict(runs[0])
        ok = [x for x in runs if "error" not in x]
        if ok:
            r = dict(ok[0])
            for key in PLACEMENT_FIGURES:
                vals = [x[key] for x in ok if x.get(key) is not None]
                r[key] = max(vals) if vals else None
        r["runs"] = runs
        log(f"  -> actors/s {r.get('actors_per_s')}, pg create+remove/s "
            f"{r.get('pg_create_removal_per_s')}, pipelined/s {r.get('pg_pipelined_per_s')}"
            + (f"  FAILED: {r['error']}" if "error" in r else ""))
        data["placement"].append(r)
        save()
    for t in sizes["tune_trials"]:
        log(f"scale: tune_bench {t} one-result trials")
        r = tune(binaries["tune_bench"], t, sizes["tune_results"])
        log(f"  -> {r.get('trials_per_s')} trials/s, {r.get('ms_per_trial_per_slot')} ms per "
            f"trial per slot" + (f"  FAILED: {r['error']}" if "error" in r else ""))
        data["tune"].append(r)
        save()

    save()
    if stamps() != built:
        log("scale: the binaries were rebuilt during the sweep; its figures mix two builds")
        data["rebuilt_during_run"] = True
        save()
    log(f"scale: wrote {json_path}")
    plot(data, png_path)
    failed = [x["command"] for k in ("heartbeat", "placement", "tune") for r in data[k]
              for x in r.get("runs", [r]) if "error" in x]
    if failed:
        log("scale: failed runs: " + "; ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
