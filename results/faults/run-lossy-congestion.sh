#!/usr/bin/env bash
# The lossy-path scenario of run-faults.sh with each QUIC congestion control:
# 5 % loss and 20 ± 10 ms each way on every datagram between edge and origin
# (npamp-loadgen impair), steady.toml at 1000 sends/s for DURATION seconds,
# 512 connections; ROUNDS alternating rounds of cubic and bbr (the gateways'
# `--congestion`). Every request must still get its own reply.
#   results/faults/run-lossy-congestion.sh [OUT]     ROUNDS=2 DURATION=20
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${ROUNDS:-2}
DURATION=${DURATION:-20}
OUT=${1:-results/faults/$(date -u +%Y-%m-%d)-congestion}
BASE=${PORT_BASE:-27200}
mkdir -p "$OUT"
source results/lib.sh
results/machine-info.sh "ROUNDS=$ROUNDS DURATION=$DURATION results/faults/run-lossy-congestion.sh $OUT" >"$OUT/machine.txt"
start mock '^mock upstream' "$GW" mock-upstream --listen "http://127.0.0.1:$((BASE + 1))"
for round in $(seq "$ROUNDS"); do
  for cc in cubic bbr; do
    start "origin-$cc-$round" '^listening on' "$GW" serve --listen "quic://127.0.0.1:$((BASE + 2))" \
      --upstream "http://127.0.0.1:$((BASE + 1))" --insecure-accept-any-peer --congestion "$cc"
    start "impair-$cc-$round" '^impaired path' "$LG" impair --listen "127.0.0.1:$((BASE + 3))" \
      --to "127.0.0.1:$((BASE + 2))" --loss 0.05 --delay-ms 20 --jitter-ms 10 --seed "$round"
    start "edge-$cc-$round" '^ingress' "$GW" serve --ingress "http://127.0.0.1:$((BASE + 4))" \
      --peer "quic://127.0.0.1:$((BASE + 3))" --insecure-accept-any-peer --congestion "$cc"
    "$LG" run results/faults/steady.toml --target "http://127.0.0.1:$((BASE + 4))/" --rate 1000 \
      --duration "$DURATION" --connections 512 --quiet --out "$OUT/$cc-$round" >"$OUT/$cc-$round.txt" 2>&1
    # Stop this round's gateways and path (the mock stays).
    for p in "${pids[@]:1}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
    pids=("${pids[0]}")
  done
done
python3 - "$OUT" "$ROUNDS" <<'PY'
import json, sys
out, rounds = sys.argv[1], int(sys.argv[2])
lines = ["# QUIC congestion control on a lossy path", "", "```", open(f"{out}/machine.txt").read().strip(), "```", "",
         "5 % loss and 20 ± 10 ms each way on every datagram between edge and origin; 1000 sends/s (1150 requests/s with batches), 512 connections.", "",
         "| round | congestion | requests | ok | lost | wrong result | replies/s | p50 ms | p99 ms | max ms |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
for r in range(1, rounds + 1):
    for cc in ["cubic", "bbr"]:
        s = json.load(open(f"{out}/{cc}-{r}/summary.json"))
        a, l = s["accounting"], s["latency_ms"]
        lines.append(f"| {r} | {cc} | {a['sent_requests']} | {a['ok']} | {a['lost']} | {a.get('wrong_result', 0)} | {s['throughput']:.0f} | {l['p50']:.0f} | {l['p99']:.0f} | {l['max']:.0f} |")
open(f"{out}/README.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
