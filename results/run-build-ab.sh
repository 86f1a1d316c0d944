#!/usr/bin/env bash
# Two builds of npamp-gateway side by side, in one run on 127.0.0.1: for
# each, a gateway pair over QUIC (TRANSPORT=tls: over TCP + TLS 1.3; edge
# HTTP ingress -> origin) in front of one static nginx upstream (`return
# 200`), and wrk closed loop at 1, 4 and 32 in flight, the builds in turn
# within each point (A first in odd rounds, B first in even ones: on this
# VM the build that runs second at a point was favoured by up to 6 %, see
# results/2026-12-04-udp-wakeups/), ROUNDS (2) times.
# Prints per point the rate, p50, and the CPU per request of the edge and
# the origin (utime + stime deltas of /proc/PID/stat), their context
# switches per request (voluntary + involuntary, summed over every thread
# in /proc/PID/task), and B over A: of the means, and the median of each
# round's B/A with its range (the steadier figure on a noisy machine).
# IN_FLIGHT ("1 4 32"), SECONDS_PER_POINT (5). Needs Debian's nginx-light and wrk.
#   [TRANSPORT=quic|tls] results/run-build-ab.sh A_BINARY B_BINARY [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
A=$(realpath "$1"); B=$(realpath "$2"); OUT=${3:-}
ROUNDS=${ROUNDS:-2}; SECS=${SECONDS_PER_POINT:-5}
source results/builds.sh
gateway_pair a "$A"
gateway_pair b "$B"
HZ=$(getconf CLK_TCK)
points=$TMP/points.tsv; : > "$points"
for round in $(seq "$ROUNDS"); do
  for c in ${IN_FLIGHT:-1 4 32}; do
    threads=1; [ "$c" -ge 32 ] && threads=2
    order="a b"; [ $((round % 2)) -eq 0 ] && order="b a"
    for build in $order; do
      u=${build}_url; url=${!u}
      e=${build}_edge_pid; o=${build}_origin_pid
      wrk -t1 -c4 -d1s -s "$TMP/post.lua" "$url" > /dev/null
      e0=$(ticks "${!e}"); o0=$(ticks "${!o}"); es0=$(switches "${!e}"); os0=$(switches "${!o}")
      wrk -t$threads -c$c -d${SECS}s --latency -s "$TMP/post.lua" "$url" > "$TMP/wrk.txt"
      e1=$(ticks "${!e}"); o1=$(ticks "${!o}"); es1=$(switches "${!e}"); os1=$(switches "${!o}")
      reqs=$(awk '/requests in/ { print $1 }' "$TMP/wrk.txt")
      p50=$(awk '$1 == "50%" { print $2 }' "$TMP/wrk.txt")
      bad=$(awk '/Non-2xx|Socket errors/' "$TMP/wrk.txt" | tr '\n' ' ')
      printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$c" "$build" "$reqs" "$((e1 - e0))" "$((o1 - o0))" \
        "$((es1 - es0))" "$((os1 - os0))" "$p50" "${bad:-none}" | tee -a "$points"
    done
  done
done
python3 - "$points" "$HZ" "$SECS" "$(basename "$A")" "$(basename "$B")" "$TRANSPORT" <<'PY' | tee "$TMP/table.md"
import sys, collections
path, hz, secs, a, b, transport = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), *sys.argv[4:7]
rows = collections.defaultdict(list)
for line in open(path):
    rnd, c, build, reqs, e, o, es, os_, p50, bad = line.rstrip("\n").split("\t")
    n = int(reqs)
    rows[(int(c), build)].append(
        (n / secs, int(e) * 1e6 / hz / n, int(o) * 1e6 / hz / n, int(es) / n, int(os_) / n, p50, bad))
print(f"A = {a}\nB = {b}\nbetween the gateways: {transport}\n")
print("| in flight | build | req/s | CPU µs/req edge | origin | switches/req edge | origin | p50 | B/A rate | B/A edge CPU | B/A origin CPU | B/A origin switches |")
print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for c in sorted({c for c, _ in rows}):
    ra, rb = rows[(c, "a")], rows[(c, "b")]
    for build, r in (("A", ra), ("B", rb)):
        def span(i, digits=0):
            lo, hi = f"{min(x[i] for x in r):.{digits}f}", f"{max(x[i] for x in r):.{digits}f}"
            return lo if lo == hi else f"{lo}–{hi}"
        rate, edge, origin, es, os_ = span(0), span(1), span(2), span(3, 1), span(4, 1)
        if build == "B":
            mean = lambda rs, i: sum(x[i] for x in rs) / len(rs)
            ratio = " | ".join(f"{mean(rb, i) / mean(ra, i):.2f}" for i in (0, 1, 2, 4))
        else:
            ratio = " | | "
        print(f"| {c} | {build} | {rate} | {edge} | {origin} | {es} | {os_} | {' '.join(x[5] for x in r)} | {ratio} |")

print("\nMedian of the rounds' B/A (lowest–highest):\n")
print("| in flight | rate | edge CPU | origin CPU | edge switches | origin switches |")
print("|---:|---|---|---|---|---|")
import statistics
for c in sorted({c for c, _ in rows}):
    pairs = list(zip(rows[(c, "a")], rows[(c, "b")]))
    cells = []
    for i in (0, 1, 2, 3, 4):
        q = sorted(b[i] / a[i] for a, b in pairs if a[i])
        cells.append(f"{statistics.median(q):.2f} ({q[0]:.2f}–{q[-1]:.2f})" if q else "—")
    print(f"| {c} | " + " | ".join(cells) + " |")
PY
if [ -n "$OUT" ]; then mkdir -p "$OUT"; cp "$points" "$TMP/table.md" "$OUT/"; fi
