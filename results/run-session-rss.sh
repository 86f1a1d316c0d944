#!/usr/bin/env bash
# Memory per client session at the edge: RSS of an edge and an origin idle,
# then with N WebSocket clients (each its own session association) sending
# the mcp-tools mix at 200 msg/s in total, through mock WebSocket upstream
# sessions. Prints one line each, and the load generator's SLO lines.
#   results/run-session-rss.sh [N]        (default 100)
# GW=path overrides the gateway binary (to compare builds).
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-100}
gw_override=${GW:-}
source results/lib.sh
GW=${gw_override:-$GW}
rss() { awk '/VmRSS/ { printf "%.1f MiB", $2 / 1024 }' "/proc/$1/status"; }
origin_pub=$("$GW" keygen --out "$TMP/origin.key")
edge_pub=$("$GW" keygen --out "$TMP/edge.key")
start mock '^mock upstream' "$GW" mock-upstream --listen ws://127.0.0.1:0
upstream=$(field mock 'mock upstream ')
start origin '^listening on' "$GW" serve --listen quic://127.0.0.1:0 --upstream "$upstream" \
  --identity "$TMP/origin.key" --trust "$edge_pub"
peer=$(field origin 'listening on ')
start edge '^ingress' "$GW" serve --ingress ws://127.0.0.1:0 --peer "$peer" \
  --identity "$TMP/edge.key" --trust "$origin_pub"
ingress=$(field edge 'ingress ')
echo "idle: edge $(rss "$edge_pid"), origin $(rss "$origin_pid")"
"$LG" run scenarios/mcp-tools.toml --target "$ingress/" --connections "$n" --rate 200 \
  --duration 6 --quiet >"$TMP/load.out" 2>&1 &
load=$!
sleep 5
echo "$n WebSocket sessions: edge $(rss "$edge_pid"), origin $(rss "$origin_pid")"
status=0
wait "$load" || status=$?
echo "load generator exit $status"
grep '^SLO' "$TMP/load.out"
