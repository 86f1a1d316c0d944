#!/usr/bin/env bash
# Where the edge's CPU goes that its connection watchdog and hyper's
# header-read timer cost: an edge of a pair over TLS (two tokio workers, as
# shipped) in front of a static nginx, wrk closed loop at IN_FLIGHT (32) for
# 5 s, `perf record` (DWARF call graphs, 999 Hz) on the edge (SIDE=origin:
# the origin) meanwhile; then the share of its samples in each named cost
# (classify.py). Needs root (perf), nginx-light and wrk. GATEWAY_BINARY
# chooses the build.
#   [GATEWAY_BINARY=B] [SIDE=edge|origin] results/2026-12-04-edge-watchdog/profile.sh NAME [OUT]
set -euo pipefail
NAME=$1; HERE=$(dirname "$(realpath "$0")"); OUT=$(realpath "${2:-$HERE}")
DATA=$(mktemp -d)
cd "$HERE/../.."
GW=${GATEWAY_BINARY:-target/release/npamp-gateway}
[ -n "${GATEWAY_BINARY:-}" ] || cargo build --release -q -p npamp-gateway-cli
TRANSPORT=${TRANSPORT:-tls}
source results/builds.sh
trap 'rm -rf "$DATA"; cleanup' EXIT
gateway_pair p "$GW"
url=$p_url; SIDE=${SIDE:-edge}
case $SIDE in edge) pid=$p_edge_pid;; origin) pid=$p_origin_pid;; *) echo "SIDE is edge or origin"; exit 2;; esac
C=${IN_FLIGHT:-32}; threads=1; [ "$C" -ge 32 ] && threads=2
wrk -t$threads -c$C -d1s -s "$TMP/post.lua" "$url" >/dev/null
SECS=${PROFILE_SECONDS:-4}
perf record -F "${FREQ:-999}" --call-graph dwarf,16384 -o "$DATA/edge.data" -p "$pid" -- sleep "$SECS" 2>/dev/null &
rec=$!
sleep 0.3
wrk -t$threads -c$C -d$((SECS + 1))s -s "$TMP/post.lua" "$url" | grep -E "Requests/sec" > "$DATA/rate.txt"
wait $rec
perf script -i "$DATA/edge.data" -F ip,sym 2>/dev/null > "$DATA/edge.stacks"
{
  echo "build: $NAME, $SIDE, $TRANSPORT, $C in flight, $(cat "$DATA/rate.txt")"
  python3 "${CLASSIFY:-$HERE/classify.py}" "$DATA/edge.stacks"
} > "$OUT/profile-$NAME.txt"
cat "$OUT/profile-$NAME.txt"
