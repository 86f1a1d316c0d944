#!/usr/bin/env bash
# A flat profile (self time per symbol, `perf record -F 2999`, no call
# graphs) of both gateways of a pair in front of a static nginx, wrk closed
# loop at IN_FLIGHT (4) for 4 s, after a 1 s warm-up; then the share of
# tokio's orphan reaper (`reap_orphans`) in each, and the rate (under perf).
# Needs root (perf), nginx-light and wrk.
#   [TRANSPORT=quic|tls] [IN_FLIGHT=4] flat-profile.sh BINARY OUT_DIR
set -euo pipefail
GW=$(realpath "$1"); OUT=$(realpath "$2"); mkdir -p "$OUT"
cd "$(dirname "$0")/../.."
source results/builds.sh
gateway_pair p "$GW"
C=${IN_FLIGHT:-4}
wrk -t1 -c"$C" -d1s -s "$TMP/post.lua" "$p_url" >/dev/null
perf record -F 2999 -o "$OUT/edge.data" -p "$p_edge_pid" -- sleep 4 >/dev/null 2>&1 &
r1=$!
perf record -F 2999 -o "$OUT/origin.data" -p "$p_origin_pid" -- sleep 4 >/dev/null 2>&1 &
r2=$!
sleep 0.2
wrk -t1 -c"$C" -d4s -s "$TMP/post.lua" "$p_url" | awk '/Requests\/sec/ { print $2 }' > "$OUT/rate.txt"
wait $r1 $r2 || true
for s in edge origin; do
  perf report -i "$OUT/$s.data" --no-children --sort sym --stdio > "$OUT/$s.txt" 2>/dev/null
  share=$(awk '/reap_orphans/ { print $1; exit }' "$OUT/$s.txt")
  echo "$(basename "$GW") $TRANSPORT $s: reap_orphans ${share:-absent}, rate $(cat "$OUT/rate.txt") req/s (under perf)"
done
