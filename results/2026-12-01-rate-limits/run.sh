#!/usr/bin/env bash
# Rate limits at 1 000 requests/s per client: an edge with two bearer
# tokens and --rate-limit 1000 (burst 100, the default tenth of a second),
# a pair over QUIC to the mock upstream, and two wrk processes at once, one
# per token, each offering as much as it can for SECS (10) seconds. For
# each client: the requests answered 200 per second of the run (the burst
# counted in), against 1 000; and the 429s wrk saw, against the edge's
# npamp_rate_limited_total. Needs Debian's wrk. Run from the repository root:
#   results/2026-12-01-rate-limits/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=results/2026-12-01-rate-limits
SECS=${SECS:-10}
source results/lib.sh
command -v wrk >/dev/null || { echo "wrk is not installed (apt-get install wrk)"; exit 1; }
A=client-a-0123456789abcdef; B=client-b-0123456789abcdef
printf '%s\n%s\n' "$A" "$B" > "$TMP/tokens"
start mock '^mock upstream' "$GW" mock-upstream --listen http://127.0.0.1:0
UP=$(field mock 'mock upstream ')
opub=$("$GW" keygen --out "$TMP/origin.key"); epub=$("$GW" keygen --out "$TMP/edge.key")
start origin '^listening on' "$GW" serve --listen quic://127.0.0.1:0 --upstream "$UP" \
  --identity "$TMP/origin.key" --trust "$epub"
start edge '^metrics' "$GW" serve --ingress http://127.0.0.1:0 --peer "$(field origin 'listening on ')" \
  --identity "$TMP/edge.key" --trust "$opub" --metrics 127.0.0.1:0 \
  --auth-token-file "$TMP/tokens" --rate-limit 1000
EDGE=$(field edge 'ingress '); METRICS=$(field edge 'metrics ')
for t in A B; do
  cat > "$TMP/$t.lua" <<LUA
wrk.method = "POST"
wrk.body = '{"jsonrpc":"2.0","id":1,"method":"echo","params":[1]}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer ${!t}"
LUA
done
results/machine-info.sh "SECS=$SECS $OUT/run.sh" > "$OUT/machine.txt"
echo "wrk: $(wrk -v 2>&1 | head -1)" >> "$OUT/machine.txt"
wrk -t1 -c8 -d${SECS}s -s "$TMP/A.lua" "$EDGE/" > "$OUT/wrk-a.txt" &
wa=$!
wrk -t1 -c8 -d${SECS}s -s "$TMP/B.lua" "$EDGE/" > "$OUT/wrk-b.txt" &
wb=$!
wait "$wa" "$wb"
curl -s "$METRICS" > "$OUT/metrics.txt"
python3 - "$OUT" 1000 100 <<'PY' | tee "$OUT/summary.md"
import re, sys
out, rate, burst = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
metrics = open(f"{out}/metrics.txt").read()
limited = int(re.search(r"^npamp_rate_limited_total (\d+)", metrics, re.M).group(1))
print("| client | requests | 429 | answered 200 | seconds | 200 per second | allowed per second (rate + burst / seconds) | 200s / allowed |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
total_429, worst = 0, 0.0
for name in ("a", "b"):
    text = open(f"{out}/wrk-{name}.txt").read()
    m = re.search(r"(\d+) requests in ([\d.]+)(m?s)", text)
    n, secs = int(m.group(1)), float(m.group(2)) / (1000 if m.group(3) == "ms" else 1)
    non2xx = int(re.search(r"Non-2xx or 3xx responses: (\d+)", text).group(1)) if "Non-2xx" in text else 0
    errors = re.search(r"Socket errors: .*", text)
    ok = n - non2xx
    allowed = rate + burst / secs
    total_429 += non2xx
    worst = max(worst, abs(ok / secs / allowed - 1))
    print(f"| {name.upper()} | {n} | {non2xx} | {ok} | {secs:.2f} | {ok / secs:.1f} | {allowed:.1f} | {ok / secs / allowed:.3f} |"
          + (f" {errors.group(0)}" if errors else ""))
print()
# wrk stops reading when its time is up: an answer in flight on one of
# its 2 x 8 connections then is counted by the edge and not by wrk.
gap = limited - total_429
print(f"429s seen by the clients: {total_429}; npamp_rate_limited_total at the edge: {limited}"
      f" ({'equal' if gap == 0 else f'{gap} more at the edge: answers in flight when wrk stopped reading, at most one per connection (16)' if 0 < gap <= 16 else 'DIFFERENT'})")
print(f"largest deviation of a client's 200s per second from what it is allowed: {worst * 100:.2f} %"
      f" ({'within' if worst <= 0.05 else 'OUTSIDE'} 5 %)")
PY
