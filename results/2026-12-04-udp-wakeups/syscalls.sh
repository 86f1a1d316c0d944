#!/usr/bin/env bash
# Syscalls per request of each gateway of a pair of BINARY (TRANSPORT=quic,
# the default, or tls) in front of a static nginx, by name: `perf trace -s`
# on the edge and on the origin while wrk runs at C (1) in flight for 3 s.
# perf trace slows the processes; the counts per request are what it is for.
# Needs root, perf, Debian's nginx-light and wrk.
#   [TRANSPORT=quic|tls] [C=1] results/2026-12-04-udp-wakeups/syscalls.sh BINARY
set -euo pipefail
BIN=$(realpath "$1")
cd "$(dirname "$0")/../.."
C=${C:-1}
source results/builds.sh
gateway_pair p "$BIN"
wrk -t1 -c4 -d1s -s "$TMP/post.lua" "$p_url" > /dev/null
perf trace -s -p "$p_edge_pid" -o "$TMP/edge.txt" -- sleep 3.5 & pe=$!
perf trace -s -p "$p_origin_pid" -o "$TMP/origin.txt" -- sleep 3.5 & po=$!
sleep 0.3
n=$(wrk -t1 -c"$C" -d3s -s "$TMP/post.lua" "$p_url" | awk '/requests in/ { print $1 }')
wait $pe $po || true
echo "$(basename "$BIN"), $TRANSPORT, $C in flight: $n requests; syscalls per request"
for side in edge origin; do
  awk -v n="$n" -v side="$side" '$2 ~ /^[0-9]+$/ && NF >= 8 { c[$1] += $2; t += $2 }
    END { printf "  %-6s %5.2f:", side, t / n; for (k in c) if (c[k] / n >= 0.05) printf " %s %.2f", k, c[k] / n; print "" }' "$TMP/$side.txt"
done
