#!/usr/bin/env bash
# Where a gateway hop's CPU goes at 4 in flight: a pair over TLS and one over
# QUIC (two tokio workers each, as shipped) in front of a static nginx, wrk
# closed loop at 4 in flight for 5 s, `perf record` (DWARF call graphs) on
# the edge and on the origin meanwhile; then each one's CPU by binary and its
# top functions, flat, into OUT (this folder). Needs root (perf),
# nginx-light and wrk. PATHS="tls quic" (default) chooses the pairs.
#   results/2026-12-02-per-hop-lanes/profile.sh [OUT]
set -euo pipefail
OUT=$(realpath "${1:-$(dirname "$0")}")
DATA=$(mktemp -d)
cd "$(dirname "$0")/../.."
source results/lib.sh
NGX=$(mktemp -d); chmod 755 "$NGX"; WORKERS=2
source results/nginx.sh
trap 'kill "$(cat "$NGX/static.pid")" 2>/dev/null; rm -rf "$DATA"; cleanup' EXIT
UP_PORT=$(free_port); nginx_static "$UP_PORT"
origin_pub=$("$GW" keygen --out "$TMP/origin.key"); edge_pub=$("$GW" keygen --out "$TMP/edge.key")
start origin '^listening on tls' "$GW" serve --listen quic://127.0.0.1:0 --listen tls://127.0.0.1:0 --upstream "http://127.0.0.1:$UP_PORT" --identity "$TMP/origin.key" --trust "$edge_pub"
Q=$(grep -m1 '^listening on quic' "$TMP/origin.out" | sed 's/^listening on //')
T=$(grep -m1 '^listening on tls' "$TMP/origin.out" | sed 's/^listening on //')
start eq '^ingress' "$GW" serve --ingress http://127.0.0.1:0 --peer "$Q" --identity "$TMP/edge.key" --trust "$origin_pub"
start et '^ingress' "$GW" serve --ingress http://127.0.0.1:0 --peer "$T" --identity "$TMP/edge.key" --trust "$origin_pub"
sleep 0.5
cat > "$TMP/post.lua" <<'LUA'
wrk.method = "POST"
wrk.body = '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}'
wrk.headers["Content-Type"] = "application/json"
LUA
for t in ${PATHS:-tls quic}; do
  name=e${t:0:1}; v=${name}_pid; epid=${!v}
  url=$(grep -m1 '^ingress' "$TMP/$name.out" | sed 's/^ingress //')/
  wrk -t1 -c4 -d1s -s "$TMP/post.lua" "$url" >/dev/null
  perf record -F 999 --call-graph dwarf,16384 -o "$DATA"/$t-edge.data -p $epid -- sleep 4 2>/dev/null &
  p1=$!
  perf record -F 999 --call-graph dwarf,16384 -o "$DATA"/$t-origin.data -p $origin_pid -- sleep 4 2>/dev/null &
  p2=$!
  sleep 0.3
  wrk -t1 -c4 -d5s -s "$TMP/post.lua" "$url" | grep -E "Requests/sec|requests in"
  wait $p1 $p2
done
for t in ${PATHS:-tls quic}; do
  for side in edge origin; do
    f="$DATA/$t-$side.data"
    {
      echo "## $t, $side: CPU by binary"
      perf report -i "$f" --no-children -g none --sort dso -q 2>/dev/null | head -5 || true
      echo "## $t, $side: top functions"
      perf report -i "$f" --no-children -g none --sort symbol -q 2>/dev/null | head -40 | cut -c1-130 || true
      echo
    } >> "$OUT/profile-4-in-flight.txt.new"
  done
done
mv "$OUT/profile-4-in-flight.txt.new" "$OUT/profile-4-in-flight.txt"
