#!/usr/bin/env python3
"""Summarizes ab-bench.sh output: per (size, sink) the association's
throughput as a share of raw quinn's in the same run (the ratio the
earlier results report), for each build, run by run, and the median."""
import re, sys, statistics
from collections import defaultdict

runs = []  # (size, keep, which, raw, assoc)
cur = None
for line in open(sys.argv[1]):
    m = re.match(r"=== round (\d+) size (\d+) keep=(\d) (\S+)", line)
    if m:
        cur = dict(size=int(m[2]), keep=int(m[3]), which=m[4], raw=None, assoc=None, fn=None)
        runs.append(cur)
        continue
    if cur is None:
        continue
    if line.startswith("bridge_frames"):
        cur["fn"] = "raw" if "raw_quinn" in line else "assoc"
        continue
    m = re.search(r"thrpt:\s+\[\S+ \S+ ([\d.]+) (\w)elem/s", line)
    if m and cur["fn"] and cur[cur["fn"]] is None:
        v = float(m[1]) * {"K": 1e3, "M": 1e6, "G": 1e9}[m[2]]
        cur[cur["fn"]] = v

table = defaultdict(lambda: defaultdict(list))
for r in runs:
    if r["raw"] and r["assoc"]:
        table[(r["size"], r["keep"])][r["which"]].append((r["assoc"], r["assoc"] / r["raw"]))

print("| message | sink | build | association, frames/s (per run) | share of raw quinn (per run) | median share |")
print("|---|---|---|---|---|---:|")
for (size, keep), builds in sorted(table.items()):
    for which in ("before", "after", *sorted(set(builds) - {"before", "after"})):
        if which not in builds:
            continue
        v = builds[which]
        rates = ", ".join(f"{a/1e3:.0f} K" for a, _ in v)
        shares = ", ".join(f"{s:.2f}" for _, s in v)
        med = statistics.median(s for _, s in v)
        print(f"| {size} B | {'keeping' if keep else 'counting'} | {which} | {rates} | {shares} | {med:.2f} |")
