#!/usr/bin/env bash
# Clients that send and never read, against an edge + origin pair over QUIC
# with the mock HTTP upstream, at the default limits (`npamp-loadgen slow`):
# 20 TCP clients on the tcp:// ingress, then 100 WebSocket clients on the
# ws:// ingress, each writing 60 KB echo requests for 15 s and reading
# nothing, with a healthy HTTP client beside them (one request every 20 ms,
# each timed). A fresh pair for each run, so each gateway's peak RSS
# (VmHWM) is that run's. Prints one line per run; passes when each
# gateway's peak stays under 256 MiB, every slow client is cut within
# --stall-timeout ± 1 s (10 s by default) of the edge's replies to it
# stopping, and the healthy client gets every reply with p99 < 50 ms. That
# moment is seen from the client: the octets waiting unread in its socket
# (FIONREAD) last grew; after it the client's receive buffer is full and
# the edge's writes to it block, which is where the edge's stall clock
# starts. Printed beside it: the time from the client's first write the
# edge did not take within 200 ms (the edge stopped reading it, which
# budgets do while replies still flow), and from connecting.
#   results/budgets/run-budgets.sh [OUT_DIR]
# Environment: DURATION (15), TCP (20), WS (100), SIZE (60000), EXTRA
# (flags for both gateways, e.g. "--memory-budget 33554432").
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-results/budgets/$(date -u +%Y-%m-%d)}
DURATION=${DURATION:-15}; TCP=${TCP:-20}; WS=${WS:-100}; SIZE=${SIZE:-60000}; EXTRA=${EXTRA:-}
mkdir -p "$OUT"
source results/lib.sh
results/machine-info.sh "results/budgets/run-budgets.sh $OUT (DURATION=$DURATION TCP=$TCP WS=$WS SIZE=$SIZE EXTRA=$EXTRA)" > "$OUT/machine.txt"
hwm() { awk '/VmHWM/ { printf "%.1f", $2 / 1024 }' "/proc/$1/status"; }
origin_pub=$("$GW" keygen --out "$TMP/origin.key")
edge_pub=$("$GW" keygen --out "$TMP/edge.key")
status=0
: > "$OUT/summary.txt"
for run in "tcp-no-read $TCP tcp" "ws-no-read $WS ws"; do
  read -r mode n scheme <<<"$run"
  start mock '^mock upstream' "$GW" mock-upstream --listen http://127.0.0.1:0
  upstream=$(field mock 'mock upstream ')
  # shellcheck disable=SC2086
  start origin '^listening on' "$GW" serve --listen quic://127.0.0.1:0 --upstream "$upstream" \
    --identity "$TMP/origin.key" --trust "$edge_pub" $EXTRA
  peer=$(field origin 'listening on ')
  # shellcheck disable=SC2086
  start edge '^ingress' "$GW" serve --ingress http://127.0.0.1:0 --ingress "$scheme://127.0.0.1:0" \
    --peer "$peer" --identity "$TMP/edge.key" --trust "$origin_pub" $EXTRA
  sleep 0.3
  http=$(grep -m1 '^ingress http://' "$TMP/edge.out" | sed 's|^ingress http://||')
  target=$(grep -m1 "^ingress $scheme://" "$TMP/edge.out" | sed "s|^ingress $scheme://||")
  base_edge=$(hwm "$edge_pid"); base_origin=$(hwm "$origin_pid")
  "$LG" slow --target "$target" --mode "$mode" --connections "$n" --duration "$DURATION" \
    --size "$SIZE" --probe "$http" > "$OUT/$mode.txt"
  edge_peak=$(hwm "$edge_pid"); origin_peak=$(hwm "$origin_pid")
  cp "$TMP/edge.err" "$OUT/$mode-edge.log"; cp "$TMP/origin.err" "$OUT/$mode-origin.log"
  python3 - "$OUT/$mode.txt" "$mode" "$n" "$base_edge" "$edge_peak" "$base_origin" "$origin_peak" >> "$OUT/summary.txt" <<'PY' || status=1
import sys
path, mode, n, be, ep, bo, op = sys.argv[1:8]
kv = open(path).read().split()
d = dict(zip(kv[0::2], kv[1::2]))
cut, still = int(d["cut_off"]), int(d["still_open"])
lo, hi = int(d["cut_off_min_ms"]) / 1000, int(d["cut_off_max_ms"]) / 1000
p99, failed = float(d.get("probe_p99_ms", "nan")), int(d.get("probe_failed", "0"))
blo, bhi = int(d.get("cut_after_blocked_min_ms", "0")) / 1000, int(d.get("cut_after_blocked_max_ms", "0")) / 1000
slo, shi = int(d.get("cut_after_silent_min_ms", "0")) / 1000, int(d.get("cut_after_silent_max_ms", "0")) / 1000
ok = float(ep) < 256 and float(op) < 256 and cut == int(n) and 9 <= slo and shi <= 11 and failed == 0 and p99 < 50
print(f"{mode} x{n}: edge peak {ep} MiB (idle {be}), origin peak {op} MiB (idle {bo}); "
      f"cut {cut}/{n} {slo:.1f}-{shi:.1f} s after the edge's replies to them stopped ({blo:.1f}-{bhi:.1f} s after it stopped reading them, {lo:.1f}-{hi:.1f} s after connecting), still open {still}; healthy client {d.get('probe_ok','0')} ok, "
      f"{failed} failed{' (' + d['probe_failed_why'] + ')' if 'probe_failed_why' in d else ''}, p50 {d.get('probe_p50_ms','-')} ms, p99 {p99} ms, max {d.get('probe_max_ms','-')} ms; "
      + ("PASS" if ok else "FAIL"))
sys.exit(0 if ok else 1)
PY
  kill "$edge_pid" "$origin_pid" "$mock_pid" 2>/dev/null || true
  wait "$edge_pid" "$origin_pid" "$mock_pid" 2>/dev/null || true
done
cat "$OUT/summary.txt"
exit $status
