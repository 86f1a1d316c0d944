#!/usr/bin/env python3
"""Turns criterion's console output into a table of ratios within each group.

    cargo bench --bench scanner 2>&1 | tee raw.txt
    python3 results/summarize.py raw.txt BASELINE_FUNCTION > summary.md

For every group it prints each function's median time, throughput (when the
group name ends in a byte size such as `/260B`), and its time as a ratio to
the given baseline function of the same group (>1 means slower than it).
"""
import re
import sys

UNITS = {"ps": 1e-3, "ns": 1.0, "µs": 1e3, "us": 1e3, "ms": 1e6, "s": 1e9}


def parse(path):
    results, current = {}, None
    for line in open(path, encoding="utf-8"):
        m = re.match(r"^([A-Za-z0-9_]+(?:/[^\s]+)+)", line)
        if m:
            current = m.group(1)
        t = re.search(r"time:\s+\[\S+ \S+ (\S+) (\S+)", line)
        if t and current and current not in results:
            results[current] = float(t.group(1)) * UNITS[t.group(2)]
    groups = {}
    for name, ns in results.items():
        group, function = name.rsplit("/", 1)
        groups.setdefault(group, {})[function] = ns
    return groups


def main():
    path, baseline = sys.argv[1], sys.argv[2]
    print(f"| group | function | median | throughput | time / `{baseline}` |")
    print("|---|---|---:|---:|---:|")
    for group, functions in parse(path).items():
        size = re.search(r"/(\d+)B$", group)
        base = functions.get(baseline)
        for function, ns in functions.items():
            thr = f"{int(size.group(1)) / ns:.2f} GB/s" if size else ""
            ratio = f"{ns / base:.2f}" if base else ""
            print(f"| {group} | {function} | {ns:.1f} ns | {thr} | {ratio} |")


if __name__ == "__main__":
    main()
