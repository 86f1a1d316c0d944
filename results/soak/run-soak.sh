#!/usr/bin/env bash
# Soak: a mixed scenario (results/soak/soak.toml: reads, an expected-error
# method, notifications, batches; successes checked against their requests)
# through two gateway processes (edge, origin, QUIC) and the mock upstream on
# 127.0.0.1, over HTTP and WebSocket at once, for MINUTES (default 10).
# Reports requests, replies, lost (must be 0), error classes, and the RSS of
# both gateways at the start (after the warm-up), the end and the peak.
#   results/soak/run-soak.sh [MINUTES] [OUT]       RATE=1000 by default (HTTP; WS gets a fifth)
# Exit status 1 if the accounting did not close or RSS grew past RSS_LIMIT_MB.
set -euo pipefail
cd "$(dirname "$0")/../.."
MINUTES=${1:-10}
OUT=${2:-results/soak/$(date -u +%Y-%m-%d)}
RATE=${RATE:-1000}
RSS_LIMIT_MB=${RSS_LIMIT_MB:-256}
SECONDS_=$(awk -v m="$MINUTES" 'BEGIN {print m * 60}')
mkdir -p "$OUT"
source results/lib.sh

"$GW" keygen --out "$TMP/origin.key" >"$TMP/origin.pub"
"$GW" keygen --out "$TMP/edge.key" >"$TMP/edge.pub"
results/machine-info.sh "RATE=$RATE results/soak/run-soak.sh $MINUTES $OUT" >"$OUT/machine.txt"
start mock '^mock upstream' "$GW" mock-upstream --listen http://127.0.0.1:0 --latency 'exp:2'
start origin '^listening on' "$GW" serve --listen quic://127.0.0.1:0 --upstream "$(field mock 'mock upstream ')" \
  --identity "$TMP/origin.key" --trust "$(cat "$TMP/edge.pub")" --metrics 127.0.0.1:0
start edge '^metrics' "$GW" serve --ingress http://127.0.0.1:0 --ingress ws://127.0.0.1:0 \
  --peer "$(field origin 'listening on ')" --identity "$TMP/edge.key" --trust "$(cat "$TMP/origin.pub")" \
  --metrics 127.0.0.1:0
HTTP=$(grep -m1 '^ingress http' "$TMP/edge.out" | sed 's/^ingress //')
WS=$(grep -m1 '^ingress ws' "$TMP/edge.out" | sed 's/^ingress //')

"$LG" run results/soak/soak.toml --target "$HTTP/" --rate "$RATE" --duration "$SECONDS_" \
  --out "$OUT/http" --quiet >"$OUT/http.txt" 2>&1 &
HTTP_LOAD=$!
# A WebSocket reply is matched by id alone (verify_echo is for HTTP).
sed '/^verify_echo/d' results/soak/soak.toml >"$TMP/soak-ws.toml"
"$LG" run "$TMP/soak-ws.toml" --target "$WS" --rate "$((RATE / 5))" --duration "$SECONDS_" \
  --connections 8 --out "$OUT/ws" --quiet >"$OUT/ws.txt" 2>&1 &
WS_LOAD=$!
# RSS of both gateways every 5 s: seconds, edge kB, origin kB.
rss() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
(t=0; while kill -0 "$HTTP_LOAD" 2>/dev/null; do
   echo "$t $(rss "$edge_pid") $(rss "$origin_pid")"; sleep 5; t=$((t + 5))
 done) >"$OUT/rss.txt" &
rc=0
wait "$HTTP_LOAD" || rc=$?
wait "$WS_LOAD" || rc=$((rc > 0 ? rc : $?))
curl -s "$(field edge 'metrics ')" >"$OUT/edge-metrics.txt"
curl -s "$(field origin 'metrics ')" >"$OUT/origin-metrics.txt"
python3 - "$OUT" "$RSS_LIMIT_MB" "$rc" <<'PY'
import json, sys
out, limit, rc = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
rows = [l.split() for l in open(f"{out}/rss.txt") if len(l.split()) == 3]
# The start is after the warm-up (5 s): the first sample at or past 10 s.
start = next((r for r in rows if int(r[0]) >= 10), rows[0])
end = rows[-1]
peak = [max(int(r[i]) for r in rows) for i in (1, 2)]
lines = ["# Soak", "", "```", open(f"{out}/machine.txt").read().strip(), "```", ""]
ok = rc == 0
for kind in ["http", "ws"]:
    s = json.load(open(f"{out}/{kind}/summary.json"))
    a = s["accounting"]
    lines += [
        f"## {kind}: {s['target']}",
        "",
        f"- sent: {a['sent_requests']} requests, {a['sent_notifications']} notifications, {a['sent_batches']} batches",
        f"- replied: {a['replied']} ({a['ok']} ok, {a['expected_errors']} expected errors, {a['unexpected_errors']} unexpected)",
        f"- error codes: {a['error_codes'] or 'none'}; HTTP status: {a['http_status'] or 'none'}; transport: {a['transport_errors'] or 'none'}",
        f"- timed out {a['timed_out']}, lost {a['lost']}, duplicated {a['duplicated']}, late {a['late']}, mismatched {a['mismatched']}, wrong result {a.get('wrong_result', 0)}",
        f"- throughput {s['throughput']:.0f} replies/s; latency ms p50 {s['latency_ms']['p50']:.2f} p99 {s['latency_ms']['p99']:.2f} max {s['latency_ms']['max']:.1f}",
        "",
    ]
    if a["lost"] or a["duplicated"] or a["mismatched"] or a.get("wrong_result", 0) or a["unexpected_errors"]:
        ok = False
lines += [
    "## RSS (MiB)",
    "",
    "| | start (t = %ss) | end (t = %ss) | peak |" % (start[0], end[0]),
    "|---|---|---|---|",
    f"| edge | {int(start[1]) / 1024:.1f} | {int(end[1]) / 1024:.1f} | {peak[0] / 1024:.1f} |",
    f"| origin | {int(start[2]) / 1024:.1f} | {int(end[2]) / 1024:.1f} | {peak[1] / 1024:.1f} |",
    "",
    f"Limit {limit:.0f} MiB: {'held' if max(peak) / 1024 <= limit else 'EXCEEDED'}. Samples every 5 s in rss.txt.",
]
if max(peak) / 1024 > limit:
    ok = False
lines += ["", f"**{'PASS' if ok else 'FAIL'}** (load generator exit status {rc})"]
open(f"{out}/README.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
sys.exit(0 if ok else 1)
PY
