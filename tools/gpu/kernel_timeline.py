#!/usr/bin/env python3
"""Reads kernel_timeline.so's output and prints where a decode step's time goes.

Only graph-launched kernels count (decode steps replayed from CUDA graphs); a step starts at
each embed kernel. A kernel's marginal time is its end minus the previous kernel's end: with
programmatic dependent launch a kernel starts before its predecessor ends, so the chain of ends
is the step's critical path. Prints, per kernel of a layer (by its order in the layer), the
median marginal and duration over the steps and layers, then the step's total.
   python3 tools/gpu/kernel_timeline.py TIMELINE [--skip-steps N] [--steps M]
(`ft bench offload` runs its --decode-context steps first: --warmup 4, then --decode of them)
"""
import re
import statistics
import sys


def short(name):
    name = name.replace("(anonymous namespace)::", "")
    base = name.split("(")[0]  # drop the parameter list
    base = re.sub(r"<.*>", "", base)  # and template arguments
    base = base.split("::")[-1]
    if "gemv_kernel" in name and re.search(r", 2>", name):
        return base + "+route+slots"  # the router with the slot cache's bookkeeping
    if "gemv_kernel" in name and re.search(r", 1>", name):
        return base + "+route"
    return base


def main():
    path = sys.argv[1]
    def flag(name, default):
        return int(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default

    skip, count = flag("--skip-steps", 4), flag("--steps", 0)
    recs = []
    for line in open(path):
        s, e, g, name = line.rstrip("\n").split(" ", 3)
        if int(g) != 0:
            recs.append((int(s), int(e), name))
    recs.sort()
    steps, cur = [], []
    for r in recs:
        if "embed" in short(r[2]) and cur:
            steps.append(cur)
            cur = []
        cur.append(r)
    if cur:
        steps.append(cur)
    steps = steps[skip:skip + count] if count > 0 else steps[skip:]
    if not steps:
        sys.exit("kernel_timeline: no graph-launched decode steps")
    # A layer: the kernels between two attention kernels' predecessors; group by the name
    # sequence after the first attention-like kernel, position within the repeating pattern.
    names = [short(r[2]) for r in steps[0]]
    first = next(i for i, n in enumerate(names) if n in ("decode_kernel", "gqa_kernel")) - 1
    period = next(i for i in range(first + 1, len(names)) if names[i] == names[first]
                  and names[i + 1] == names[first + 1]) - first
    per = {}
    totals = []
    for st in steps:
        totals.append((st[-1][1] - st[0][0]) / 1e3)
        body = st[first:]
        n_layers = len(body) // period
        for li in range(1, n_layers - 1):  # skip the first and last layers
            for j in range(period):
                i = first + li * period + j
                s, e, name = st[i]
                prev_end = st[i - 1][1]
                per.setdefault(j, []).append((short(name), (e - prev_end) / 1e3, (e - s) / 1e3))
    print(f"{len(steps)} steps, {period} kernels per layer; median per kernel (us):")
    print(f"{'kernel':40s} {'marginal':>9s} {'duration':>9s}")
    tot = 0.0
    for j in range(period):
        rows = per[j]
        m = statistics.median(r[1] for r in rows)
        d = statistics.median(r[2] for r in rows)
        tot += m
        print(f"{rows[0][0]:40s} {m:9.2f} {d:9.2f}")
    print(f"{'layer':40s} {tot:9.2f}")
    print(f"step (first start to last end): median {statistics.median(totals):.1f} us")
    # The device's idle time between steps: a step's first start minus the previous step's
    # last end (the host's turn: reading the token, copying the next inputs, the graph launch).
    gaps = [(b[0][0] - a[-1][1]) / 1e3 for a, b in zip(steps, steps[1:])]
    if gaps:
        print(f"between steps (last end to next first start): median {statistics.median(gaps):.1f} us")


if __name__ == "__main__":
    main()
