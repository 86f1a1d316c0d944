#!/usr/bin/env bash
# Syscalls and context switches per request of each gateway of a pair (QUIC
# and TLS), static nginx upstream, wrk closed loop at 1, 4 and 32 in flight
# (4 s each), counted with `perf stat` on the gateway's pid; then the
# syscalls by name at 4 in flight. Needs root (tracepoints), nginx-light, wrk.
#   results/2026-12-01-per-hop-static/syscalls.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
source results/lib.sh
NGX=$(mktemp -d); chmod 755 "$NGX"
UP_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat > "$NGX/s.conf" <<CONF
worker_processes $(nproc); pid $NGX/s.pid; error_log $NGX/e.log warn; events { worker_connections 4096; }
http { access_log off; client_body_temp_path $NGX/b; keepalive_requests 1000000;
server { listen 127.0.0.1:$UP_PORT; default_type application/json;
  location / { return 200 '{"jsonrpc":"2.0","id":1,"result":"0x1"}'; } } }
CONF
nginx -p "$NGX" -c "$NGX/s.conf" -e "$NGX/x.log"
trap 'kill "$(cat "$NGX/s.pid")"; rm -rf "$NGX"; cleanup' EXIT
cat > "$TMP/post.lua" <<'LUA'
wrk.method = "POST"
wrk.body = '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}'
wrk.headers["Content-Type"] = "application/json"
LUA
origin_pub=$("$GW" keygen --out "$TMP/origin.key"); edge_pub=$("$GW" keygen --out "$TMP/edge.key")
start origin '^listening on tls' "$GW" serve --listen quic://127.0.0.1:0 --listen tls://127.0.0.1:0 \
  --upstream "http://127.0.0.1:$UP_PORT" --identity "$TMP/origin.key" --trust "$edge_pub"
QUIC=$(grep -m1 '^listening on quic' "$TMP/origin.out" | sed 's/^listening on //')
TLS=$(grep -m1 '^listening on tls' "$TMP/origin.out" | sed 's/^listening on //')
start eq '^ingress' "$GW" serve --ingress http://127.0.0.1:0 --peer "$QUIC" --identity "$TMP/edge.key" --trust "$origin_pub"
start et '^ingress' "$GW" serve --ingress http://127.0.0.1:0 --peer "$TLS" --identity "$TMP/edge.key" --trust "$origin_pub"
sleep 0.5
BY_NAME=$(for s in futex epoll_wait sendmsg sendmmsg recvmsg recvmmsg write writev read recvfrom sendto; do
  printf "syscalls:sys_enter_%s," $s; done | sed 's/,$//')
# measure EVENTS URL C: the counts of EVENTS for the edge and the origin
# during a wrk run at C in flight, per request.
measure() {
  perf stat -x, -e "$1" -p "$epid" -o "$TMP/e.txt" -- sleep 4.5 & local pe=$!
  perf stat -x, -e "$1" -p "$origin_pid" -o "$TMP/o.txt" -- sleep 4.5 & local po=$!
  sleep 0.2
  n=$(wrk -t1 -c"$3" -d4s -s "$TMP/post.lua" "$2" | awk '/requests in/ { print $1 }')
  wait $pe $po
  for side in edge origin; do
    f=$TMP/${side:0:1}.txt
    awk -F, -v n="$n" -v side=$side -v t="$t" -v c="$3" '$3 ~ /[a-z]/ && $1 + 0 > 0 {
      name = $3; sub("syscalls:sys_enter_", "", name); sub("raw_syscalls:sys_enter", "all syscalls", name)
      printf "%s %d in flight, %s: %s %.2f per request\n", t, c, side, name, $1 / n }' "$f"
  done
}
for t in quic tls; do
  name=eq; [ $t = tls ] && name=et
  pid_var=${name}_pid; epid=${!pid_var}
  url=$(grep -m1 '^ingress' "$TMP/$name.out" | sed 's/^ingress //')/
  wrk -t1 -c4 -d1s -s "$TMP/post.lua" "$url" > /dev/null
  for c in 1 4 32; do measure raw_syscalls:sys_enter,context-switches "$url" $c; done
  measure "$BY_NAME" "$url" 4
done
