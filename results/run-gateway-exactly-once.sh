#!/usr/bin/env bash
# Two npamp-gateway processes (edge, origin) and the mock upstream on
# 127.0.0.1; 64 closed-loop HTTP clients for DURATION seconds (default 60)
# through the pair over QUIC, then over TLS, and directly against the mock
# upstream (the baseline, same run). Every reply is checked against its
# request (own id, own payload); the edge's /metrics is saved after each run.
#   results/run-gateway-exactly-once.sh [DURATION] [CLIENTS]
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${1:-60}
CLIENTS=${2:-64}
OUT=results/$(date -u +%Y-%m-%d)-gateway-exactly-once
mkdir -p "$OUT"
cargo build --release -q
BIN=target/release/npamp-gateway
TMP=$(mktemp -d)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; rm -rf "$TMP"; }
trap cleanup EXIT

# start NAME ARGS...: runs the gateway, waits for its last startup line.
start() {
  local name=$1; shift
  "$BIN" "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" &
  pids+=($!)
  for _ in $(seq 100); do
    grep -qE '^(metrics|mock upstream|listening on tls)' "$TMP/$name.out" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "$name did not start:"; cat "$TMP/$name.err"; exit 1
}
field() { grep -m1 "^$2" "$TMP/$1.out" | sed "s|^$2||"; }

"$BIN" keygen --out "$TMP/origin.key" >"$TMP/origin.pub"
"$BIN" keygen --out "$TMP/edge.key" >"$TMP/edge.pub"
start mock mock-upstream --listen http://127.0.0.1:0
UPSTREAM=$(field mock 'mock upstream ')
start origin serve --listen quic://127.0.0.1:0 --listen tls://127.0.0.1:0 \
  --upstream "$UPSTREAM" --identity "$TMP/origin.key" --trust "$(cat "$TMP/edge.pub")"
QUIC=$(grep -m1 '^listening on quic' "$TMP/origin.out" | sed 's/^listening on //')
TLS=$(grep -m1 '^listening on tls' "$TMP/origin.out" | sed 's/^listening on //')

results/machine-info.sh "results/run-gateway-exactly-once.sh $DURATION $CLIENTS" >"$OUT/machine.txt"
for transport in quic tls; do
  peer=$QUIC; [ "$transport" = tls ] && peer=$TLS
  start "edge-$transport" serve --ingress http://127.0.0.1:0 --peer "$peer" \
    --identity "$TMP/edge.key" --trust "$(cat "$TMP/origin.pub")" --metrics 127.0.0.1:0
  ingress=$(field "edge-$transport" 'ingress ')
  metrics=$(field "edge-$transport" 'metrics ')
  echo "== gateway pair over $transport: $ingress" | tee "$OUT/$transport.txt"
  "$BIN" exactly-once --url "$ingress/" --clients "$CLIENTS" --duration "$DURATION" | tee -a "$OUT/$transport.txt"
  curl -s "$metrics" >"$OUT/$transport.edge-metrics.txt"
done
echo "== baseline: the mock upstream directly: $UPSTREAM" | tee "$OUT/direct.txt"
"$BIN" exactly-once --url "$UPSTREAM/" --clients "$CLIENTS" --duration "$DURATION" | tee -a "$OUT/direct.txt"
echo "results in $OUT"
