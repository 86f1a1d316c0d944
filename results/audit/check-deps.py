#!/usr/bin/env python3
"""Dependency check for when the RustSec advisory database cannot be reached.

For every package in Cargo.lock (from crates.io) it reads the crate's entry in
the crates.io sparse index and reports: versions that are yanked (authors
yank releases with serious bugs and most RustSec advisories' affected
versions), and the newest release of the same semver line, so a security
fix published as a patch release shows as "behind".

    python3 results/audit/check-deps.py [Cargo.lock ...]   # default: both lockfiles

Exit status 1 if a locked version is yanked. Needs network access to
index.crates.io only. `cargo audit` is the full check; run it where GitHub
(the advisory database) is reachable.
"""
import json
import sys
import tomllib
import urllib.request
from concurrent.futures import ThreadPoolExecutor


def index_path(name):
    n = name.lower()
    if len(n) <= 2:
        return f"{len(n)}/{n}"
    if len(n) == 3:
        return f"3/{n[0]}/{n}"
    return f"{n[:2]}/{n[2:4]}/{n}"


def fetch(name):
    url = f"https://index.crates.io/{index_path(name)}"
    with urllib.request.urlopen(url, timeout=20) as r:
        return [json.loads(line) for line in r.read().decode().splitlines() if line]


def parse(v):
    core = v.split("+")[0]
    main, _, pre = core.partition("-")
    nums = tuple(int(x) for x in main.split("."))
    return nums, pre


def line_of(nums):
    # semver-compatible line: 1.x.y -> (1,), 0.3.z -> (0, 3), 0.0.z -> (0, 0, z)
    if nums[0] > 0:
        return nums[:1]
    if nums[1] > 0:
        return nums[:2]
    return nums[:3]


def main():
    locks = sys.argv[1:] or ["Cargo.lock", "fuzz/Cargo.lock"]
    pkgs = set()
    for lock in locks:
        with open(lock, "rb") as f:
            for p in tomllib.load(f).get("package", []):
                if str(p.get("source", "")).startswith("registry+"):
                    pkgs.add((p["name"], p["version"]))
    names = sorted({n for n, _ in pkgs})
    with ThreadPoolExecutor(16) as ex:
        entries = dict(zip(names, ex.map(fetch, names)))
    yanked, behind = [], []
    for name, version in sorted(pkgs):
        releases = entries[name]
        mine = next((r for r in releases if r["vers"] == version), None)
        if mine is None:
            print(f"?? {name} {version}: not in the index")
            continue
        if mine.get("yanked"):
            yanked.append(f"{name} {version}")
        nums, _ = parse(version)
        same_line = [
            parse(r["vers"])
            for r in releases
            if not r.get("yanked")
            and not parse(r["vers"])[1]
            and line_of(parse(r["vers"])[0]) == line_of(nums)
        ]
        newest = max((n for n, _ in same_line), default=nums)
        if newest > nums:
            behind.append(f"{name} {version} (newest {'.'.join(map(str, newest))})")
    print(f"{len(pkgs)} locked crates.io packages in {', '.join(locks)}")
    print(f"yanked: {len(yanked)}")
    for y in yanked:
        print(f"  YANKED {y}")
    print(f"behind the newest compatible release: {len(behind)}")
    for b in behind:
        print(f"  {b}")
    return 1 if yanked else 0


if __name__ == "__main__":
    sys.exit(main())
