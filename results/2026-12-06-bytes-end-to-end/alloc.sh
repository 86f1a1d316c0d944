#!/usr/bin/env bash
# results/2026-12-01-allocations/run.sh with a message size: heap
# allocations per request on the HTTP path (edge with HTTP ingress, origin
# with the mock upstream, over QUIC), counted by uprobes on mimalloc's three
# aligned entry points, at 1 and at 32 in flight for 5 s. OCTETS > 0 posts
# `echo` with one string parameter of OCTETS octets instead of the small
# eth_blockNumber request, so the request (at the origin) and the reply (at
# the edge) are both that large. Also prints each process's CPU time per
# request (utime + stime, /proc/PID/stat).
#   alloc.sh CHECKOUT [OCTETS]   (the checkout's target/release/npamp-gateway, NO_BUILD=1 to use it as built)
set -euo pipefail
octets=${2:-0}
cd "$1"
source results/lib.sh
source results/procs.sh
BIN=$(pwd)/$GW
perf probe -q -d 'probe_npamp:*' 2>/dev/null || true
for f in mi_malloc_aligned mi_zalloc_aligned mi_realloc_aligned; do perf probe -q -x "$BIN" "$f"; done
if [ "$octets" -gt 0 ]; then
  pad=$(head -c "$octets" /dev/zero | tr '\0' 'x')
  body="{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"echo\",\"params\":[\"$pad\"]}"
else
  body='{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}'
fi
cat > "$TMP/post.lua" <<LUA
wrk.method = "POST"
wrk.body = '$body'
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
curl -s -X POST -H 'Content-Type: application/json' --data-binary @<(printf '%s' "$body") "$http" > "$TMP/check"
check=$(head -c 60 "$TMP/check")
echo "message: $octets octets (0: eth_blockNumber); reply begins $check"
wrk -t1 -c4 -d2s -s "$TMP/post.lua" "$http" > /dev/null
ev=probe_npamp:mi_malloc_aligned,probe_npamp:mi_zalloc_aligned,probe_npamp:mi_realloc_aligned
sum() { awk -F, '/probe_npamp/ { n += $1 } END { print n }' "$1"; }
for c in 1 32; do
  te=$(ticks "$edge_pid"); to=$(ticks "$origin_pid")
  perf stat -x, -e "$ev" -p "$edge_pid" -o "$TMP/e.txt" -- sleep 6 & pe=$!
  perf stat -x, -e "$ev" -p "$origin_pid" -o "$TMP/o.txt" -- sleep 6 & po=$!
  sleep 0.3
  n=$(wrk -t1 -c$c -d5s -s "$TMP/post.lua" "$http" | awk '/requests in/ { print $1 }')
  wait $pe $po
  te=$(( $(ticks "$edge_pid") - te )); to=$(( $(ticks "$origin_pid") - to ))
  e=$(sum "$TMP/e.txt"); o=$(sum "$TMP/o.txt")
  awk -v c=$c -v n=$n -v e=$e -v o=$o -v te=$te -v to=$to -v hz="$(getconf CLK_TCK)" 'BEGIN {
    printf "%d in flight: %d requests; allocations per request: edge %.1f, origin %.1f; CPU us per request (probes on): edge %.0f, origin %.0f\n",
      c, n, e / n, o / n, te / hz * 1e6 / n, to / hz * 1e6 / n }'
done
perf probe -q -d 'probe_npamp:*'
