#!/usr/bin/env bash
# The same load against four paths, in one run, on 127.0.0.1:
#   (a) the mock upstream directly,
#   (b) an npamp-gateway pair over QUIC (edge HTTP ingress -> origin -> mock),
#   (c) the same pair over TCP + TLS 1.3,
#   (d) two nginx reverse proxies in series with TLS 1.3 between them
#       (front: HTTP in, HTTPS out with keep-alive; back: HTTPS in, HTTP out),
# for each scenario given (default: an open-loop fixed rate for latency, and
# a closed loop for capacity). Needs Debian's nginx (`apt-get install nginx-light`).
# GATEWAY_FLAGS go to both gateways (e.g. "--max-body 16777216" for
# scenarios/large-4mib.toml); nginx takes bodies up to 64 MiB.
# OUT names the result directory (default results/DATE-side-by-side).
#   [GATEWAY_FLAGS=...] [OUT=DIR] results/run-side-by-side.sh [SCENARIO...]
set -euo pipefail
cd "$(dirname "$0")/.."
SCENARIOS=("$@")
[ ${#SCENARIOS[@]} -eq 0 ] && SCENARIOS=(scenarios/eth-mixed.toml scenarios/closed-64.toml)
read -r -a FLAGS <<<"${GATEWAY_FLAGS:-}"
OUT=${OUT:-results/$(date -u +%Y-%m-%d)-side-by-side}
mkdir -p "$OUT"
command -v nginx >/dev/null || { echo "nginx is not installed (apt-get install nginx-light)"; exit 1; }
cargo build --release -q --workspace
GW=target/release/npamp-gateway
LG=target/release/npamp-loadgen
TMP=$(mktemp -d)
# nginx's workers run as an unprivileged user: large bodies spill to temp
# files, so their directory must be reachable (mktemp -d is 0700).
NGX=$(mktemp -d)
chmod 755 "$NGX"
pids=()
cleanup() {
  kill "${pids[@]}" 2>/dev/null || true
  [ -f "$NGX/front.pid" ] && kill "$(cat "$NGX/front.pid")" 2>/dev/null || true
  [ -f "$NGX/back.pid" ] && kill "$(cat "$NGX/back.pid")" 2>/dev/null || true
  rm -rf "$TMP" "$NGX"
}
trap cleanup EXIT

start() {
  local name=$1 ready=$2; shift 2
  "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" &
  pids+=($!)
  for _ in $(seq 100); do
    grep -q "$ready" "$TMP/$name.out" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "$name did not start:"; cat "$TMP/$name.err"; exit 1
}

WORKERS=$(nproc)
source results/nginx.sh

"$GW" keygen --out "$TMP/origin.key" >"$TMP/origin.pub"
"$GW" keygen --out "$TMP/edge.key" >"$TMP/edge.pub"
MOCK_PORT=$(free_port)
start mock "mock upstream" "$GW" mock-upstream --listen "http://127.0.0.1:$MOCK_PORT"
MOCK=http://127.0.0.1:$MOCK_PORT
start origin "listening on tls" "$GW" serve --listen quic://127.0.0.1:0 --listen tls://127.0.0.1:0 \
  --upstream "$MOCK" --identity "$TMP/origin.key" --trust "$(cat "$TMP/edge.pub")" ${FLAGS[@]+"${FLAGS[@]}"}
QUIC=$(grep -m1 '^listening on quic' "$TMP/origin.out" | sed 's/^listening on //')
TLS=$(grep -m1 '^listening on tls' "$TMP/origin.out" | sed 's/^listening on //')
for t in quic tls; do
  peer=$QUIC; [ $t = tls ] && peer=$TLS
  start "edge-$t" "^ingress" "$GW" serve --ingress http://127.0.0.1:0 --peer "$peer" \
    --identity "$TMP/edge.key" --trust "$(cat "$TMP/origin.pub")" ${FLAGS[@]+"${FLAGS[@]}"}
done
EDGE_QUIC=$(grep -m1 '^ingress' "$TMP/edge-quic.out" | sed 's/^ingress //')/
EDGE_TLS=$(grep -m1 '^ingress' "$TMP/edge-tls.out" | sed 's/^ingress //')/

# nginx pair: front (HTTP) -> TLS 1.3 -> back (HTTPS) -> mock.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
  -subj /CN=localhost -keyout "$NGX/key.pem" -out "$NGX/cert.pem" 2>/dev/null
FRONT_PORT=$(free_port); BACK_PORT=$(free_port)
nginx_conf back "
  upstream mock { server 127.0.0.1:$MOCK_PORT; keepalive 256; }
  server {
    listen 127.0.0.1:$BACK_PORT ssl;
    ssl_certificate $NGX/cert.pem; ssl_certificate_key $NGX/key.pem;
    ssl_protocols TLSv1.3;
    location / { proxy_pass http://mock; proxy_http_version 1.1; proxy_set_header Connection \"\"; }
  }"
nginx_conf front "
  upstream back { server 127.0.0.1:$BACK_PORT; keepalive 256; }
  server {
    listen 127.0.0.1:$FRONT_PORT;
    location / {
      proxy_pass https://back; proxy_http_version 1.1; proxy_set_header Connection \"\";
      proxy_ssl_protocols TLSv1.3; proxy_ssl_session_reuse on;
    }
  }"
sleep 0.5
NGINX=http://127.0.0.1:$FRONT_PORT/

results/machine-info.sh "${GATEWAY_FLAGS:+GATEWAY_FLAGS=\"$GATEWAY_FLAGS\" }results/run-side-by-side.sh ${SCENARIOS[*]}" >"$OUT/machine.txt"
echo "nginx: $(nginx -v 2>&1)" >>"$OUT/machine.txt"
for scenario in "${SCENARIOS[@]}"; do
  name=$(basename "$scenario" .toml)
  mkdir -p "$OUT/$name"
  for path in direct gateway-quic gateway-tls nginx-tls; do
    case $path in
      direct) url=$MOCK/ ;;
      gateway-quic) url=$EDGE_QUIC ;;
      gateway-tls) url=$EDGE_TLS ;;
      nginx-tls) url=$NGINX ;;
    esac
    echo "== $name: $path ($url)"
    "$LG" run "$scenario" --target "$url" --quiet --out "$OUT/$name/$path" | tee "$OUT/$name/$path.txt" || true
  done
done
python3 results/side-by-side-table.py "$OUT" | tee "$OUT/README.md"
