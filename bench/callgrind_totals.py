#!/usr/bin/env python3
"""Instructions per call from sync_call_cost's callgrind dumps (bench/callgrind_sync.sh).

  callgrind_totals.py DIR PHASE...

For each PHASE (a dump named by CALLGRIND_DUMP_STATS_AT), prints one line:

  PHASE TOTAL SPIN

TOTAL: the self cost summed over the files of that dump (callgrind writes one, all threads
together); it equals the dump's `totals:` line. SPIN: the part of it spent going
round busy-wait loops (a `pause` and the instructions up to the jump back to it), which the
caller subtracts. Valgrind runs one thread at a time, so a thread that spins on another stays
there until valgrind switches threads: libuv's uv__async_io spins (up to 997 `pause`s) while
the driver's main thread is inside uv_async_send, which happens on some runs and not others.
Natively that window is a few nanoseconds; under valgrind it adds 0-4k instructions per call
and made the totals differ by up to 8% between runs. Each iteration is counted by the
execution count of the `pause` instruction, so the dump must hold instruction addresses
(--dump-instr=yes).
"""

import collections
import glob
import os
import re
import struct
import subprocess
import sys

POSITION_RE = re.compile(r"^(ob|fl|fi|fe|fn|cob|cfi|cfl|cfn)=\((\d+)\)(?: (.*))?$")


def parse_position(token, last):
    """One compressed position column: '0x1f', '+3', '-3', '*' or a decimal."""
    if token == "*":
        return last
    if token[0] in "+-":
        sign = 1 if token[0] == "+" else -1
        return last + sign * int(token[1:], 0)
    return int(token, 0)


def self_costs(path):
    """(object path, address) -> self cost, and the trigger name, of one dump file."""
    names = {}
    trigger = None
    obj = None
    costs = collections.Counter()
    positions = None
    last = []
    skip_next = False  # the line after calls= is the call's inclusive cost, not self cost
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("desc: Trigger: Client Request: "):
                trigger = line[len("desc: Trigger: Client Request: "):]
                continue
            if line.startswith("positions:"):
                positions = line.split()[1:]
                last = [0] * len(positions)
                continue
            m = POSITION_RE.match(line)
            if m:
                kind, ident, name = m.groups()
                key = ("ob" if kind.endswith("ob") else kind[-2:], ident)
                if name is not None:
                    names[key] = name
                if kind == "ob":
                    obj = names[key]
                continue
            if line.startswith("calls="):
                skip_next = True
                continue
            if not line or not (line[0].isdigit() or line[0] in "+-*"):
                continue
            fields = line.split()
            n = len(positions)
            last = [parse_position(t, l) for t, l in zip(fields[:n], last)]
            if skip_next:
                skip_next = False
                continue
            if positions[0] != "instr":
                sys.exit(f"{path}: no instruction addresses; run callgrind with --dump-instr=yes")
            costs[(obj, last[0])] += int(fields[n]) if len(fields) > n else 0
    return trigger, costs


def segments(path):
    """The ELF file's PT_LOAD segments as (vaddr, offset, filesz)."""
    with open(path, "rb") as f:
        head = f.read(64)
        if head[:4] != b"\x7fELF" or head[4] != 2:
            return []
        phoff, = struct.unpack_from("<Q", head, 0x20)
        phentsize, phnum = struct.unpack_from("<HH", head, 0x36)
        f.seek(phoff)
        table = f.read(phentsize * phnum)
    out = []
    for i in range(phnum):
        p_type, _, offset, vaddr, _, filesz = struct.unpack_from("<IIQQQQ", table, i * phentsize)
        if p_type == 1:
            out.append((vaddr, offset, filesz))
    return out


def pause_addresses(path, addresses):
    """Those of `addresses` (relative to the object, as callgrind gives them) that hold `pause`."""
    if not os.path.isfile(path):
        return []
    segs = segments(path)
    found = []
    with open(path, "rb") as f:
        for a in addresses:
            for vaddr, offset, filesz in segs:
                if vaddr <= a < vaddr + filesz - 1:
                    f.seek(offset + a - vaddr)
                    if f.read(2) == b"\xf3\x90":
                        found.append(a)
                    break
    return found


def loop_length(path, pause):
    """Instructions from `pause` to the first jump back to it (the spin loop), by objdump."""
    listing = subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", f"--start-address={pause:#x}",
         f"--stop-address={pause + 64:#x}", path],
        capture_output=True, text=True, check=True).stdout
    count = 0
    for line in listing.splitlines():
        m = re.match(r"^\s*([0-9a-f]+):\s+(\S+)\s*([0-9a-f]*)", line)
        if not m:
            continue
        count += 1
        mnemonic, target = m.group(2), m.group(3)
        if mnemonic.startswith("j") and target and int(target, 16) == pause:
            return count
    return 0  # no loop found: count nothing as spinning


def main():
    directory, phases = sys.argv[1], sys.argv[2:]
    per_phase = collections.defaultdict(collections.Counter)
    for path in glob.glob(os.path.join(directory, "callgrind.out.*")):
        trigger, costs = self_costs(path)
        if trigger in phases:
            per_phase[trigger].update(costs)
    lengths = {}
    for phase in phases:
        costs = per_phase.get(phase)
        if not costs:
            sys.exit(f"no '{phase}' dump in {directory}")
        by_object = collections.defaultdict(list)
        for (obj, address), cost in costs.items():
            if cost > 0:
                by_object[obj].append(address)
        spin = 0
        for obj, addresses in by_object.items():
            for pause in pause_addresses(obj, addresses):
                if (obj, pause) not in lengths:
                    lengths[(obj, pause)] = loop_length(obj, pause)
                spin += costs[(obj, pause)] * lengths[(obj, pause)]
        print(phase, sum(costs.values()), spin)


if __name__ == "__main__":
    main()
