#!/usr/bin/env python3
"""Summarizes rp-bench.sh output: per allocator and message size, each
build's time per frame (criterion's estimate / 64, median over rounds) and
the ratio of each build to the first."""
import re, sys, statistics
from collections import defaultdict

t = defaultdict(list)  # (alloc, label, size) -> [ns per frame]
cur = None
name = None
labels = []
for line in open(sys.argv[1]):
    m = re.match(r"=== round \d+ (\S+) (\S+)", line)
    if m:
        cur = (m[1], m[2])
        if m[2] not in labels:
            labels.append(m[2])
        continue
    m = re.match(r"receive_path/(\d+)B_kept", line)
    if m:
        name = int(m[1])
    m = re.search(r"time:\s+\[\S+ \S+ ([\d.]+) (\S+)", line)
    if m and cur and name is not None:
        v = float(m[1]) * {"ns": 1, "µs": 1e3, "ms": 1e6}[m[2]] / 64
        t[(cur[0], cur[1], name)].append(v)
        name = None
sizes = sorted({k[2] for k in t})
print("| allocator | message | " + " | ".join(f"{l}, ns/frame" for l in labels) + " | " + " | ".join(f"{l} / {labels[0]}" for l in labels[1:]) + " |")
print("|---|---|" + "---:|" * (2 * len(labels) - 1))
for alloc in ("glibc", "mimalloc"):
    for s in sizes:
        med = [statistics.median(t[(alloc, l, s)]) for l in labels]
        runs = ["/".join(f"{v:.0f}" for v in t[(alloc, l, s)]) for l in labels]
        print(f"| {alloc} | {s} B | " + " | ".join(f"{m:.0f} ({r})" for m, r in zip(med, runs)) + " | " + " | ".join(f"{m / med[0]:.2f}" for m in med[1:]) + " |")
