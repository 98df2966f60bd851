#!/usr/bin/env python3
"""Runs the ported tests and prints one table of Ray's 39 items (12 api_test TESTs, 23
cluster_mode_test TESTs, 4 example programs).

- per-process: each TEST alone (--gtest_filter=Suite.Name), in a fresh process;
- one-process: each gtest binary once, every TEST in file order, as Ray runs them (Ray's tests
  share state through Init/Shutdown: later TESTs use the runtime an earlier one started).
Every process runs in a session of its own, under a timeout (RAYTESTS_TIMEOUT, 300 s); when it
ends, whatever is left of its process group is killed by pid. Logs: logs/.
"""
import json
import os
import re
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.path.join(HERE, "build")
LOGS = os.path.join(HERE, "logs")
WORK = os.path.join(HERE, "work")  # the tests' working directory (LogTest writes ./tmp/)
TIMEOUT = int(os.environ.get("RAYTESTS_TIMEOUT", "300"))
TEST_RE = re.compile(r"^TEST\((\w+),\s*(\w+)\)", re.M)


def tests_of(ray_file):
    with open(os.path.join(HERE, "ray-src", ray_file)) as f:
        return [m.group(1) + "." + m.group(2) for m in TEST_RE.finditer(f.read())]


def group_members(pgid):
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[2]) == pgid:
                pids.append(int(d))
        except (OSError, ValueError):
            pass
    return pids


def run(cmd, log, env_extra=None):
    """Runs cmd in a new session; returns (rc, output, seconds, leftovers killed)."""
    env = dict(os.environ)
    env["RAYD_TEMP_DIR"] = os.path.join(HERE, "rayd-tmp")
    env.update(env_extra or {})
    os.makedirs(WORK, exist_ok=True)
    start = time.time()
    with open(log, "w") as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=WORK, env=env,
                             start_new_session=True)
        try:
            rc = p.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
            rc = "timeout"
    left = group_members(p.pid)
    for pid in left:  # processes this run started and left behind
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    with open(log, errors="replace") as f:
        output = f.read()
    return rc, output, time.time() - start, left


def gtest_failure(output):
    """The first failure of a gtest run, on one line."""
    lines = output.splitlines()
    for i, l in enumerate(lines):
        if re.search(r"(: Failure|^unknown file: Failure)$", l):
            where = os.path.basename(l.split(": Failure")[0])
            rest = [x.strip() for x in lines[i + 1:i + 4]
                    if x.strip() and not x.startswith("[")]
            return (where + ": " + " | ".join(rest[:3]))[:300]
    return None


def describe_exit(rc, output):
    if rc == "timeout":
        return f"timeout after {TIMEOUT} s"
    if rc < 0:
        name = signal.Signals(-rc).name if -rc in signal.Signals._value2member_map_ else str(-rc)
        tail = [l for l in output.splitlines() if l.strip()][-1:]
        return f"killed by {name}" + (": " + tail[0].strip()[:200] if tail else "")
    tail = [l for l in output.splitlines() if l.strip()][-1:]
    return f"exit {rc}" + (": " + tail[0].strip()[:200] if tail else "")


def main():
    os.makedirs(LOGS, exist_ok=True)
    with open(os.path.join(BUILD, "status.json")) as f:
        status = json.load(f)
    binaries = [("api_test", tests_of("api_test.cc")),
                ("cluster_mode_test", tests_of("cluster_mode_test.cc"))]
    rows = []  # (item, per-process, one-process, detail)
    leaks = []
    one_summary = []
    for binary, tests in binaries:
        exe = os.path.join(BUILD, binary)
        built = status["targets"].get(binary, {}).get("ok", False)
        # one process, Ray's way
        one = {}
        if built:
            rc, out, secs, left = run([exe], os.path.join(LOGS, f"{binary}.all.log"))
            if left:
                leaks.append(f"{binary} (all): {len(left)}")
            for t in tests:
                if t in status["disabled"]:
                    one[t] = ("FAIL", "does not compile")
                    continue
                if re.search(r"^\[       OK \] " + re.escape(t) + r" ", out, re.M):
                    one[t] = ("PASS", "")
                elif re.search(r"^\[  FAILED  \] " + re.escape(t) + r" \(", out, re.M):
                    block = out.split("[ RUN      ] " + t, 1)[1].split("[  FAILED  ] " + t)[0]
                    one[t] = ("FAIL", gtest_failure(block) or "failed")
                else:
                    one[t] = ("FAIL", "not reached: " + describe_exit(rc, out))
            passed = sum(1 for v in one.values() if v[0] == "PASS")
            one_summary.append(f"{binary}: {passed}/{len(tests)} passed in one process "
                               f"({describe_exit(rc, out) if rc != 0 else 'exit 0'}, "
                               f"{secs:.0f} s)")
        else:
            one_summary.append(f"{binary}: not built")
        # each TEST alone
        for t in tests:
            if not built:
                rows.append((t, "FAIL", "FAIL", "build: " + status["targets"][binary]["error"]))
                continue
            if t in status["disabled"]:
                rows.append((t, "FAIL", "FAIL",
                             "does not compile: " + status["disabled"][t]))
                continue
            rc, out, secs, left = run([exe, "--gtest_filter=" + t],
                                      os.path.join(LOGS, f"{binary}.{t}.log"))
            if left:
                leaks.append(f"{t}: {len(left)}")
            if rc == 0 and "[  PASSED  ] 1 test." in out:
                rows.append((t, "PASS", one[t][0], ("one-proc: " + one[t][1]) if one[t][1] else ""))
            else:
                why = gtest_failure(out) or describe_exit(rc, out)
                rows.append((t, "FAIL", one[t][0], why))
            print(f"  {t}: {rows[-1][1]} ({secs:.0f} s)", file=sys.stderr, flush=True)
    examples = [("simple_job", {"TEST_KEY": "TEST_VALUE"}), ("simple_driver", None),
                ("simple_kv_store", None), ("metric_example", None)]
    for name, env in examples:
        item = "example " + name
        st = status["targets"].get(name, {})
        if not st.get("ok"):
            rows.append((item, "FAIL", "-", "build: " + st.get("error", "?")))
            continue
        rc, out, secs, left = run([os.path.join(BUILD, name)],
                                  os.path.join(LOGS, f"{name}.log"), env)
        if left:
            leaks.append(f"{name}: {len(left)}")
        ok = rc == 0
        rows.append((item, "PASS" if ok else "FAIL", "-", "" if ok else describe_exit(rc, out)))
        print(f"  {item}: {rows[-1][1]} ({secs:.0f} s)", file=sys.stderr, flush=True)

    width = max(len(r[0]) for r in rows)
    print(f"{'#':>2}  {'item':<{width}}  alone  one-proc  first failure")
    for i, (item, alone, one_p, why) in enumerate(rows, start=1):
        print(f"{i:>2}  {item:<{width}}  {alone:<5}  {one_p:<8}  {why}")
    n_alone = sum(1 for r in rows if r[1] == "PASS")
    print(f"\nper-test-process: {n_alone} of {len(rows)} pass")
    for s in one_summary:
        print("one process: " + s)
    n_one = sum(1 for r in rows if r[2] == "PASS") + sum(
        1 for r in rows if r[2] == "-" and r[1] == "PASS")
    print(f"one process (examples counted once): {n_one} of {len(rows)} pass")
    for r in status.get("removed", []):
        print(f"build: took out {r['what']} ({r['file']}): {r['error']}")
    if leaks:
        print("processes left behind and killed: " + ", ".join(leaks))


if __name__ == "__main__":
    main()
