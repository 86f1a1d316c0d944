#!/usr/bin/env bash
# Capture and replay (issue 54, item 8), on 127.0.0.1: a gateway pair (HTTP
# and WebSocket ingress, N-PAMP over QUIC, the mock upstream) under mixed
# load (an Ethereum read mix with notifications and batches over HTTP at
# HTTP_RATE/s, the same over WebSocket at WS_RATE/s, at once) records what
# its clients send (`serve --capture`, params of eth_call redacted); the
# capture is then replayed through the same pair at 1x and at 2x. Prints,
# and writes to OUT (default results/DATE-capture-replay): the capture's
# own rate (requests between its first send and its last), each replay's
# offered and sent rate and their ratio to the capture's times the speed,
# and the replays' summaries and reports.
#   [HTTP_RATE=800] [WS_RATE=200] [DURATION=10] [OUT=DIR] results/run-capture-replay.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source results/lib.sh
HTTP_RATE=${HTTP_RATE:-800}
WS_RATE=${WS_RATE:-200}
DURATION=${DURATION:-10}
OUT=${OUT:-results/$(date -u +%Y-%m-%d)-capture-replay}
mkdir -p "$OUT"

sed -e 's/^rate = 1000$/rate = 1000\n/' -e 's/^\[mix\]$/[mix]\nnotification_share = 0.05\nbatch_share = 0.05\nbatch_size = 4/' \
  -e '/^\[slo\]/,$d' scenarios/eth-mixed.toml >"$TMP/mixed.toml"

start mock "^mock upstream" "$GW" mock-upstream --listen http://127.0.0.1:0
"$GW" keygen --out "$TMP/origin.key" >"$TMP/origin.pub"
"$GW" keygen --out "$TMP/edge.key" >"$TMP/edge.pub"
start origin "^listening on" "$GW" serve --listen quic://127.0.0.1:0 \
  --upstream "$(field mock 'mock upstream ')" --identity "$TMP/origin.key" --trust "$(cat "$TMP/edge.pub")"
start edge "^ingress ws" "$GW" serve --ingress http://127.0.0.1:0 --ingress ws://127.0.0.1:0 \
  --peer "$(field origin 'listening on ')" --identity "$TMP/edge.key" --trust "$(cat "$TMP/origin.pub")" \
  --capture "$OUT/capture.jsonl" --capture-redact 'eth_call:/0/data'
HTTP=$(field edge 'ingress http')
HTTP="http$HTTP"
WS=$(field edge 'ingress ws')
WS="ws$WS"

# The mixed load, both ingresses at once.
"$LG" run "$TMP/mixed.toml" --quiet --target "$HTTP" --rate "$HTTP_RATE" --duration "$DURATION" \
  --out "$OUT/load-http" >"$OUT/load-http.txt" 2>&1 &
http_load=$!
"$LG" run "$TMP/mixed.toml" --quiet --target "$WS" --rate "$WS_RATE" --duration "$DURATION" --connections 4 \
  --out "$OUT/load-ws" >"$OUT/load-ws.txt" 2>&1
wait "$http_load"
# The capture as the load left it (the edge goes on capturing: the
# replays through it would be added).
sleep 1
mv "$OUT/capture.jsonl" "$TMP/live.jsonl"
cp "$TMP/live.jsonl" "$OUT/capture.jsonl"

for speed in 1 2; do
  "$LG" replay "$OUT/capture.jsonl" --quiet --speed "${speed}x" --target "$HTTP" \
    --out "$OUT/replay-${speed}x" >"$OUT/replay-${speed}x.txt" 2>&1 || true
done

sleep 1
python3 - "$OUT" "$TMP/live.jsonl" <<'PY' | tee "$OUT/table.txt"
import json, sys, os
out = sys.argv[1]
lines = [json.loads(l) for l in open(os.path.join(out, "capture.jsonl"))]
header, sends = lines[0], lines[1:]
def requests(m):
    objs = m if isinstance(m, list) else [m]
    return sum(1 for o in objs if "method" in o and o.get("id") is not None)
n, reqs = len(sends), sum(requests(s["message"]) for s in sends)
span = (sends[-1]["at_us"] - sends[0]["at_us"]) / 1e6
# N sends over a span place N in span * N / (N - 1): rates over that.
dur = span * n / (n - 1)
rate = reqs / dur
redacted = sum(1 for s in sends if '"<redacted>"' in json.dumps(s["message"]))
loads = [json.load(open(os.path.join(out, d, "summary.json"))) for d in ("load-http", "load-ws")]
sent = sum(l["accounting"]["sent_requests"] for l in loads)
print(f"captured  {n} sends, {reqs} requests over {span:.3f} s: {rate:.1f} requests/s "
      f"(the loads sent {sent} requests, warm-ups included); {redacted} sends with eth_call data redacted")
# The edge went on capturing: after the load's sends come each replay's,
# as the edge saw them arrive, an independent measure of the replay.
live = [json.loads(l) for l in open(sys.argv[2])][1:]
for i, speed in enumerate((1, 2)):
    s = json.load(open(os.path.join(out, f"replay-{speed}x", "summary.json")))
    r, a, l = s["rates"], s["accounting"], s["latency_ms"]
    want = rate * speed
    seen = live[(i + 1) * n:(i + 2) * n]
    seen_rate = float("nan")
    if len(seen) == n:
        seen_span = (seen[-1]["at_us"] - seen[0]["at_us"]) / 1e6
        seen_rate = sum(requests(x["message"]) for x in seen) / (seen_span * n / (n - 1))
    print(f"replay {speed}x  offered {r['offered']:.1f}/s  sent {r['sent']:.1f}/s "
          f"({100 * r['sent'] / want:.2f} % of the captured rate x {speed}); "
          f"arrived at the edge {seen_rate:.1f}/s ({100 * seen_rate / want:.2f} %); "
          f"schedule lag p99 {s['schedule_lag_ms']['p99']:.3f} ms; "
          f"requests {a['sent_requests']}/{reqs}, replied {a['replied']}, lost {a['lost']}; "
          f"p99 {l['p99']:.3f} ms")
PY
# Kept compressed (gunzip -k to replay it again).
gzip -f -9 "$OUT/capture.jsonl"
bash results/machine-info.sh "HTTP_RATE=$HTTP_RATE WS_RATE=$WS_RATE DURATION=$DURATION results/run-capture-replay.sh" \
  >"$OUT/machine.txt"
