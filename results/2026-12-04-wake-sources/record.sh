#!/usr/bin/env bash
# Which thread wakes which inside each gateway of a pair over QUIC (static
# nginx upstream, wrk closed loop at C in flight for 2 s): sched_waking and
# sched_switch with DWARF call graphs, recorded on the edge and on the
# origin, then sorted by source with wasted.py (beside this file). Needs
# root (tracepoints), perf, Debian's nginx-light and wrk.
#   [C=1] results/2026-12-04-wake-sources/record.sh [OUT]
set -euo pipefail
HERE=$(realpath "$(dirname "$0")")
OUT=$(realpath -m "${1:-$HERE/c${C:-1}}")
mkdir -p "$OUT"
cd "$HERE/../.."
BIN=$(realpath "${GATEWAY_BINARY:-target/release/npamp-gateway}")
source results/builds.sh
gateway_pair g "$BIN"
wrk -t1 -c4 -d1s -s "$TMP/post.lua" "$g_url" >/dev/null
recorders=()
for side in edge origin; do
  v=g_${side}_pid
  perf record -e sched:sched_waking -e sched:sched_switch --call-graph dwarf,8192 \
    -o "$TMP/$side.data" -p "${!v}" -- sleep 3 2>/dev/null &
  recorders+=($!)
done
sleep 0.3
n=$(wrk -t1 -c"${C:-1}" -d2s -s "$TMP/post.lua" "$g_url" | awk '/requests in/ { print $1 }')
wait "${recorders[@]}"
for side in edge origin; do
  v=g_${side}_pid
  ls "/proc/${!v}/task" > "$TMP/$side.tids"
  perf script -i "$TMP/$side.data" --no-inline -F tid,time,event,trace,ip,sym 2>/dev/null > "$TMP/$side.script"
  {
    echo "# $side, ${C:-1} in flight, $(git rev-parse --short HEAD)"
    python3 "$HERE/wasted.py" "$TMP/$side.script" "$TMP/$side.tids" "$n"
  } | tee "$OUT/$side.txt"
done
