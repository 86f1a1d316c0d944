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
source results/lib.sh

"$GW" keygen --out "$TMP/origin.key" >"$TMP/origin.pub"
"$GW" keygen --out "$TMP/edge.key" >"$TMP/edge.pub"
start mock '^mock upstream' "$GW" mock-upstream --listen http://127.0.0.1:0
UPSTREAM=$(field mock 'mock upstream ')
start origin '^listening on tls' "$GW" serve --listen quic://127.0.0.1:0 --listen tls://127.0.0.1:0 \
  --upstream "$UPSTREAM" --identity "$TMP/origin.key" --trust "$(cat "$TMP/edge.pub")"
QUIC=$(grep -m1 '^listening on quic' "$TMP/origin.out" | sed 's/^listening on //')
TLS=$(grep -m1 '^listening on tls' "$TMP/origin.out" | sed 's/^listening on //')

results/machine-info.sh "results/run-gateway-exactly-once.sh $DURATION $CLIENTS" >"$OUT/machine.txt"
for transport in quic tls; do
  peer=$QUIC; [ "$transport" = tls ] && peer=$TLS
  start "edge-$transport" '^metrics' "$GW" serve --ingress http://127.0.0.1:0 --peer "$peer" \
    --identity "$TMP/edge.key" --trust "$(cat "$TMP/origin.pub")" --metrics 127.0.0.1:0
  ingress=$(field "edge-$transport" 'ingress ')
  metrics=$(field "edge-$transport" 'metrics ')
  echo "== gateway pair over $transport: $ingress" | tee "$OUT/$transport.txt"
  "$GW" exactly-once --url "$ingress/" --clients "$CLIENTS" --duration "$DURATION" | tee -a "$OUT/$transport.txt"
  curl -s "$metrics" >"$OUT/$transport.edge-metrics.txt"
done
echo "== baseline: the mock upstream directly: $UPSTREAM" | tee "$OUT/direct.txt"
"$GW" exactly-once --url "$UPSTREAM/" --clients "$CLIENTS" --duration "$DURATION" | tee -a "$OUT/direct.txt"
echo "results in $OUT"
