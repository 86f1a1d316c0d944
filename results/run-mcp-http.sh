#!/usr/bin/env bash
# What MCP's Streamable HTTP costs through a gateway pair, in one run on 127.0.0.1.
# Four gateway pairs over QUIC, five loads, the same closed loop (HTTP ingress,
# 64 in flight, `echo`), in alternating rounds:
#   jsonrpc      --protocol jsonrpc, HTTP upstream: one POST per request on a
#                shared keep-alive pool (the baseline);
#   mcp-json     --protocol mcp, the same mock: one MCP session per
#                association, JSON replies;
#   mcp-events   --protocol mcp, the mock answering with `text/event-stream`
#                events (`mock-upstream --event-stream`), as MCP servers do;
#   mcp-sessions the mcp-events pair, loaded as MCP clients load it
#                (`mcp+http://`): each connection an MCP session at the
#                edge (an association of its own), replies as event streams;
#   jsonrpc-64   the control for mcp-sessions: the jsonrpc pair's stateless
#                path with as many associations as mcp-sessions has sessions
#                (edge `--pool-size 64`), one request in flight on each.
# Prints replies/s per round and each path as a share of the baseline's in
# the same round; writes OUT (default results/DATE-mcp-http).
#   [ROUNDS=3] [OUT=DIR] results/run-mcp-http.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source results/lib.sh
ROUNDS=${ROUNDS:-3}
OUT=${OUT:-results/$(date -u +%Y-%m-%d)-mcp-http}
mkdir -p "$OUT"

"$GW" keygen --out "$TMP/origin.key" >"$TMP/origin.pub"
"$GW" keygen --out "$TMP/edge.key" >"$TMP/edge.pub"
start mock-json "^mock upstream" "$GW" mock-upstream --listen http://127.0.0.1:0
start mock-events "^mock upstream" "$GW" mock-upstream --listen http://127.0.0.1:0 --event-stream
declare -A EDGE
for path in jsonrpc jsonrpc-64 mcp-json mcp-events; do
  protocol=mcp; mock=mock-events; pool=()
  [[ $path = jsonrpc* ]] && protocol=jsonrpc
  [ $path = jsonrpc-64 ] && pool=(--pool-size 64)
  [ $path != mcp-events ] && mock=mock-json
  start "origin-$path" "^listening on" "$GW" serve --listen quic://127.0.0.1:0 \
    --protocol $protocol --upstream "$(field $mock 'mock upstream ')/mcp" \
    --identity "$TMP/origin.key" --trust "$(cat "$TMP/edge.pub")"
  start "edge-$path" "^ingress" "$GW" serve --ingress http://127.0.0.1:0 \
    --protocol $protocol --peer "$(field "origin-$path" 'listening on ')" \
    --identity "$TMP/edge.key" --trust "$(cat "$TMP/origin.pub")" ${pool[@]+"${pool[@]}"}
  EDGE[$path]="$(field "edge-$path" 'ingress ')/"
done

results/machine-info.sh "results/run-mcp-http.sh (ROUNDS=$ROUNDS)" >"$OUT/machine.txt"
for round in $(seq "$ROUNDS"); do
  mkdir -p "$OUT/round-$round"
  for path in jsonrpc mcp-json mcp-events mcp-sessions jsonrpc-64; do
    target=${EDGE[$path]:-}
    [ $path = mcp-sessions ] && target="mcp+${EDGE[mcp-events]}"
    "$LG" run scenarios/closed-64.toml --target "$target" --duration 5 --quiet \
      --out "$OUT/round-$round/$path" >"$OUT/round-$round/$path.txt" 2>&1 ||
      { echo "round $round $path failed:"; cat "$OUT/round-$round/$path.txt"; exit 1; }
  done
done
python3 - "$OUT" "$ROUNDS" <<'PY' | tee "$OUT/table.md"
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
paths = ["jsonrpc", "mcp-json", "mcp-events", "mcp-sessions", "jsonrpc-64"]
print("| round | " + " | ".join(f"{p} replies/s" for p in paths) + " | "
      + " | ".join(f"{p} ×" for p in paths[1:]) + " |")
print("|---:|" + "---:|" * (2 * len(paths) - 1))
ratios = {p: [] for p in paths[1:]}
for r in range(1, rounds + 1):
    s = {p: json.load(open(f"{out}/round-{r}/{p}/summary.json")) for p in paths}
    for p in paths:
        a = s[p]["accounting"]
        bad = sum(a.get(k, 0) for k in ("lost", "duplicated", "mismatched", "wrong_result"))
        assert bad == 0 and s[p]["pass"], f"round {r} {p}: {a}"
    t = {p: s[p]["throughput"] for p in paths}
    for p in paths[1:]:
        ratios[p].append(t[p] / t["jsonrpc"])
    print(f"| {r} | " + " | ".join(f"{t[p]:.0f}" for p in paths) + " | "
          + " | ".join(f"{t[p] / t['jsonrpc']:.2f}" for p in paths[1:]) + " |")
print()
print("median share of the baseline: " + ", ".join(
    f"{p} {statistics.median(v):.2f}" for p, v in ratios.items()))
PY
