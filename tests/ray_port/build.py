#!/usr/bin/env python3
"""Builds the ported tests so that one test that does not compile fails only itself.

build-src/ starts as a copy of ported/. Each target is built (-j1, ninja -k 0). When a gtest
target fails to compile, every compiler error is traced to the top-level item of our file that
holds it (through gcc's "required from here" lines for errors inside rayd's headers): a TEST is
put under `#if 0` and counted as failed with that error; a helper function is put under `#if 0`
too (the TESTs that use it then fail to compile in the next round, and are reported with the
helper's error); a missing #include is commented out. Then the target is built again, up to
MAX_ROUNDS times. The examples get no such help: they build or fail.

Writes build/status.json: {targets: {name: {ok, error}}, disabled: {"Suite.Name": error},
removed: [what else was taken out, with its error]}.
"""
import json
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PORTED = os.path.join(HERE, "ported")
SRC = os.path.join(HERE, "build-src")
BUILD = os.path.join(HERE, "build")
GTEST_TARGETS = ["api_test", "cluster_mode_test"]
EXAMPLES = ["simple_job", "simple_driver", "simple_kv_store", "metric_example"]
MAX_ROUNDS = 15


def run(cmd, **kw):
    env = dict(os.environ, LC_ALL="C", LANG="C")
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=env, **kw)


def top_level_items(text):
    """[(first_line, last_line)] of the top-level declarations of a C++ file (1-based), each
    preprocessor line an item of its own. Skips comments, strings, chars and raw strings."""
    items = []
    depth = 0
    line = 1
    start = None  # first line with content of the current item
    i, n = 0, len(text)
    at_line_start = True
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            at_line_start = True
            i += 1
            continue
        if at_line_start and c in " \t":
            i += 1
            continue
        if at_line_start and c == "#" and depth == 0:
            # a preprocessor line (with continuations)
            first = line
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    line += 1
                    i += 1
                i += 1
            if start is None:
                items.append((first, line))
            continue
        at_line_start = False
        if text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            line += text.count("\n", i, j)
            i = j
            continue
        if start is None and not c.isspace():
            start = line
        m = re.match(r'R"([^()\\ ]{0,16})\(', text[i:i + 20])
        if m and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            end = text.find(")" + m.group(1) + '"', i)
            end = n if end < 0 else end + len(m.group(1)) + 2
            line += text.count("\n", i, end)
            i = end
            continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                if text[j] == "\\":
                    j += 1
                j += 1
            i = j + 1
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0 and start is not None:
                # `};` and `} x;` end at the `;`; a function body ends here.
                k = i + 1
                while k < n and text[k] in " \t":
                    k += 1
                if k < n and text[k] == ";":
                    i = k
                items.append((start, line))
                start = None
        elif c == ";" and depth == 0 and start is not None:
            items.append((start, line))
            start = None
        i += 1
    return items


TEST_RE = re.compile(r"^\s*TEST\((\w+),\s*(\w+)\)")


def parse_errors(output, ours):
    """[(file, line, message)]: each error located in one of our files, or, for an error in
    another file, at the lines of our files in its instantiation context."""
    located = []
    context = []  # lines of our files seen since the last error (gcc prints them before it)
    for raw in output.splitlines():
        m = re.match(r"^(/[^:]+):(\d+):(?:\d+:)?\s+(.*)$", raw)
        if not m:
            continue
        path, lineno, rest = m.group(1), int(m.group(2)), m.group(3)
        mine = os.path.realpath(path) in ours
        is_error = rest.startswith("error:") or rest.startswith("fatal error:")
        if is_error:
            msg = rest.split(":", 1)[1].strip()
            if mine:
                located.append((os.path.realpath(path), lineno, msg))
            else:
                where = os.path.basename(path) + ":" + str(lineno)
                for (p, l) in context:
                    located.append((p, l, msg + " [in " + where + "]"))
            context = []
        elif mine and "required from" in rest:
            context.append((os.path.realpath(path), lineno))
    return located


LINK_RE = re.compile(r"undefined reference to `([^']*)'")
LINK_FN_RE = re.compile(r"in function `(\w+)_(\w+)_Test::TestBody\(\)'")


def item_name(lines, first, last):
    head = " ".join(lines[first - 1:min(last, first + 2)])
    m = TEST_RE.match(head)
    if m:
        return "TEST", m.group(1) + "." + m.group(2)
    m = re.search(r"(\w+)\s*\(", head)
    return "other", (m.group(1) if m else head.strip()[:40])


def patch(path, marks, disabled, removed):
    """marks: {line: message}. Puts the items holding them under #if 0. Returns True when
    something changed."""
    with open(path) as f:
        text = f.read()
    lines = text.split("\n")
    items = top_level_items(text)
    wrap = {}  # first line -> (last line, message)
    comment_out = {}
    for lineno, msg in sorted(marks.items()):
        for (a, b) in items:
            if a <= lineno <= b:
                if lines[a - 1].lstrip().startswith("#include"):
                    comment_out[a] = msg
                elif a not in wrap:
                    wrap[a] = (b, msg)
                break
    if not wrap and not comment_out:
        return False
    helpers = {n: e for n, e in removed_helpers(removed).items()}
    for a, (b, msg) in wrap.items():
        kind, name = item_name(lines, a, b)
        # A TEST that no longer compiles because a helper was taken out: say why the helper went.
        for h, herr in helpers.items():
            if "'" + h + "'" in msg:
                msg = "uses " + h + "(), which did not compile: " + herr
        if kind == "TEST":
            disabled.setdefault(name, msg)
        else:
            removed.append({"what": name, "file": os.path.basename(path), "error": msg})
    for a, msg in comment_out.items():
        removed.append({"what": lines[a - 1].strip(), "file": os.path.basename(path),
                        "error": msg})
    out = []
    for idx, text_line in enumerate(lines, start=1):
        if idx in comment_out:
            out.append("// raytests: removed (" + comment_out[idx][:100] + "): " + text_line)
            continue
        if idx in wrap:
            out.append("#if 0  // raytests: does not compile: " + wrap[idx][1][:150])
        out.append(text_line)
        for a, (b, _) in wrap.items():
            if b == idx:
                out.append("#endif  // raytests")
    with open(path, "w") as f:
        f.write("\n".join(out))
    return True


def removed_helpers(removed):
    return {r["what"]: r["error"] for r in removed if not r["what"].startswith("#")}


def first_error(output):
    for raw in output.splitlines():
        if "error:" in raw or "undefined reference" in raw or "CMake Error" in raw:
            return raw.replace(HERE + "/", "").strip()
    lines = [l for l in output.splitlines() if l.strip()]
    return lines[-1].strip() if lines else "build failed"


def main():
    shutil.rmtree(SRC, ignore_errors=True)
    shutil.copytree(PORTED, SRC)
    ours = {os.path.realpath(os.path.join(SRC, f)) for f in os.listdir(SRC)}
    prefix = os.environ.get("RAYD_PREFIX", "/tmp/rayd-prefix")
    cfg = run(["cmake", "-S", HERE, "-B", BUILD, "-G", "Ninja",
               "-DCMAKE_PREFIX_PATH=" + prefix])
    status = {"targets": {}, "disabled": {}, "removed": []}
    logdir = os.path.join(BUILD, "build-logs")
    os.makedirs(logdir, exist_ok=True)
    if cfg.returncode != 0:
        err = first_error(cfg.stdout)
        for t in GTEST_TARGETS + EXAMPLES:
            status["targets"][t] = {"ok": False, "error": "cmake configure: " + err}
        print(cfg.stdout)
    else:
        for t in GTEST_TARGETS + EXAMPLES:
            rounds = MAX_ROUNDS if t in GTEST_TARGETS else 1
            ok, err = False, ""
            for r in range(rounds):
                res = run(["cmake", "--build", BUILD, "--target", t, "-j1", "--", "-k", "0"])
                with open(os.path.join(logdir, f"{t}.round{r}.log"), "w") as f:
                    f.write(res.stdout)
                if res.returncode == 0:
                    ok = True
                    break
                err = first_error(res.stdout)
                if t not in GTEST_TARGETS:
                    break
                marks = {}
                for (p, l, msg) in parse_errors(res.stdout, ours):
                    marks.setdefault(p, {}).setdefault(l, msg)
                for m in LINK_FN_RE.finditer(res.stdout):
                    # a link error inside a TEST: find that TEST's first line
                    name = m.group(1) + "." + m.group(2)
                    for p in ours:
                        with open(p) as f:
                            for i, ln in enumerate(f, start=1):
                                tm = TEST_RE.match(ln)
                                if tm and tm.group(1) + "." + tm.group(2) == name:
                                    und = LINK_RE.search(res.stdout)
                                    marks.setdefault(p, {}).setdefault(
                                        i, "undefined reference to " +
                                        (und.group(1) if und else "?"))
                changed = False
                for p, m in marks.items():
                    changed |= patch(p, m, status["disabled"], status["removed"])
                print(f"build.py: {t}: round {r}: {err}", file=sys.stderr)
                if not changed:
                    break
            status["targets"][t] = {"ok": ok, "error": "" if ok else err}
            print(f"build.py: {t}: {'built' if ok else 'FAILED: ' + err}", file=sys.stderr)
    with open(os.path.join(BUILD, "status.json"), "w") as f:
        json.dump(status, f, indent=1)
    for name, err in status["disabled"].items():
        print(f"build.py: disabled {name}: {err}", file=sys.stderr)
    for r in status["removed"]:
        print(f"build.py: removed {r['what']} ({r['file']}): {r['error']}", file=sys.stderr)


if __name__ == "__main__":
    main()
