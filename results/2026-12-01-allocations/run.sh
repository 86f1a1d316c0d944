#!/usr/bin/env bash
# Heap allocations per request on the HTTP path, whole processes: an edge
# (HTTP ingress) and an origin (HTTP upstream, the mock) over QUIC, wrk
# posting one small JSON-RPC request at 1 and at 32 in flight for 5 s. Every
# allocation the Rust code makes goes through mimalloc's three aligned entry
# points (the `mimalloc` crate's GlobalAlloc); a uprobe on each counts calls
# per process (`perf stat`), divided by the requests wrk completed. Idle
# allocations (timers) are printed first: a few per second, not subtracted.
# Needs root (uprobes) and wrk.
#   results/2026-12-01-allocations/run.sh [REPO_DIR]   (default: this checkout)
# REPO_DIR: another checkout whose release binary to measure (A/B).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "${1:-$here/../..}"
source results/lib.sh
BIN=$(pwd)/$GW
perf probe -q -d 'probe_npamp:*' 2>/dev/null || true
for f in mi_malloc_aligned mi_zalloc_aligned mi_realloc_aligned; do perf probe -q -x "$BIN" "$f"; done
cat > "$TMP/post.lua" <<'LUA'
wrk.method = "POST"
wrk.body = '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}'
wrk.headers["Content-Type"] = "application/json"
LUA
origin_pub=$("$GW" keygen --out "$TMP/origin.key")
edge_pub=$("$GW" keygen --out "$TMP/edge.key")
start mock '^mock upstream' "$GW" mock-upstream --listen http://127.0.0.1:0
upstream=$(field mock 'mock upstream ')
start origin '^listening on' "$GW" serve --listen quic://127.0.0.1:0 --upstream "$upstream" \
  --identity "$TMP/origin.key" --trust "$edge_pub"
peer=$(field origin 'listening on ')
start edge '^ingress' "$GW" serve --ingress http://127.0.0.1:0 --peer "$peer" \
  --identity "$TMP/edge.key" --trust "$origin_pub"
sleep 0.5
http=$(grep -m1 '^ingress http://' "$TMP/edge.out" | sed 's|^ingress ||')
wrk -t1 -c4 -d2s -s "$TMP/post.lua" "$http" > /dev/null
ev=probe_npamp:mi_malloc_aligned,probe_npamp:mi_zalloc_aligned,probe_npamp:mi_realloc_aligned
sum() { awk -F, '/probe_npamp/ { n += $1 } END { print n }' "$1"; }
perf stat -x, -e "$ev" -p "$edge_pid" -o "$TMP/e.txt" -- sleep 3
perf stat -x, -e "$ev" -p "$origin_pid" -o "$TMP/o.txt" -- sleep 3
echo "idle: edge $(sum "$TMP/e.txt") origin $(sum "$TMP/o.txt") allocations in 3 s"
for c in 1 32; do
  perf stat -x, -e "$ev" -p "$edge_pid" -o "$TMP/e.txt" -- sleep 6 & pe=$!
  perf stat -x, -e "$ev" -p "$origin_pid" -o "$TMP/o.txt" -- sleep 6 & po=$!
  sleep 0.3
  n=$(wrk -t1 -c$c -d5s -s "$TMP/post.lua" "$http" | awk '/requests in/ { print $1 }')
  wait $pe $po
  e=$(sum "$TMP/e.txt"); o=$(sum "$TMP/o.txt")
  awk -v c=$c -v n=$n -v e=$e -v o=$o 'BEGIN { printf "%d in flight: %d requests; per request: edge %.1f, origin %.1f\n", c, n, e / n, o / n }'
done
perf probe -q -d 'probe_npamp:*'
