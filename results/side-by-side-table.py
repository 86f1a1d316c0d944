#!/usr/bin/env python3
"""Tabulates a side-by-side run: throughput and latency of each path, as
ratios to the direct path of the same scenario in the same run."""
import json
import pathlib
import sys

out = pathlib.Path(sys.argv[1])
paths = ["direct", "gateway-quic", "gateway-tls", "nginx-tls"]
print(f"# Side by side: {out.name}\n")
print("Command, machine and date: `machine.txt`. Every path ran the same scenario")
print("in the same run, one after the other; ratios are to `direct` (the mock")
print("upstream without anything in between). Latency is measured from each")
print("request's intended send time.\n")
for scenario in sorted(p for p in out.iterdir() if p.is_dir()):
    rows = {}
    for path in paths:
        f = scenario / path / "summary.json"
        if f.exists():
            rows[path] = json.loads(f.read_text())
    if "direct" not in rows:
        continue
    base = rows["direct"]
    s = base
    print(f"## {scenario.name} ({s['model']} loop, {s['connections']} connections, {s['duration_s']:.0f} s)\n")
    print("| path | replies/s | × direct | p50 ms | p99 ms | p99.9 ms | p99 × direct | errors | lost |")
    print("|---|---|---|---|---|---|---|---|---|")
    for path, r in rows.items():
        a = r["accounting"]
        errors = a["unexpected_errors"] + sum(a["transport_errors"].values()) + a["timed_out"]
        lat = r["latency_ms"]
        ratio = r["throughput"] / base["throughput"] if base["throughput"] else 0
        p99r = lat["p99"] / base["latency_ms"]["p99"] if base["latency_ms"]["p99"] else 0
        print(f"| {path} | {r['throughput']:.0f} | {ratio:.2f} | {lat['p50']:.3f} | {lat['p99']:.3f} | {lat['p999']:.3f} | {p99r:.2f} | {errors} | {a['lost']} |")
    print()
