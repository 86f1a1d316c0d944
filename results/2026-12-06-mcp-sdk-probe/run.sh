#!/usr/bin/env bash
# The MCP Python SDK 2.3.0 (PyPI `mcp`) against a server written with the SDK's own server
# classes, direct and through a gateway pair over QUIC and over TLS (issue 52).
# Servers: `dual` (the SDK's MCPServer as it ships: 2026-07-28 and 2025-11-25 on one endpoint,
# picked per request by MCP-Protocol-Version) and `legacy` (the same server answering 2026-era
# requests as a 2025-11-25-only server does). Client modes: legacy, auto, 2026-07-28.
# Each run prints `STEP name PASS|FAIL detail`; the collected lines go to steps.tsv and table.md,
# the gateways' logs (RUST_LOG=debug) and each run's HTTP exchanges to logs/.
# Needs: python3 with venv, PyPI reachable, cargo (NO_BUILD=1 with GATEWAY_BINARY to skip).
#   results/2026-12-06-mcp-sdk-probe/run.sh   (from the repository root or anywhere)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE/../.."
OUT=${OUT:-$HERE}
TMP=$(mktemp -d)
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true
  done
  rm -rf "$TMP"
}
trap cleanup EXIT

# start NAME READY COMMAND...: COMMAND in the background (stdout in $TMP/NAME.out, stderr in
# $OUT/logs/NAME.log), waiting 15 s at most for a stdout line matching READY.
start() {
  local name=$1 ready=$2 pid; shift 2
  "$@" >"$TMP/$name.out" 2>"$OUT/logs/$name.log" &
  pid=$!
  pids+=("$pid")
  for _ in $(seq 300); do
    grep -qsE "$ready" "$TMP/$name.out" && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  echo "$name did not start:"; cat "$OUT/logs/$name.log"; exit 1
}
# field NAME PREFIX: the rest of NAME's first stdout line starting with PREFIX.
field() { grep -m1 "^$2" "$TMP/$1.out" | sed "s|^$2||"; }
# dropped NAME: NAME's npamp_dropped_total (messages dropped: no client, unknown correlation...).
dropped() {
  local url; url=$(field "$1" 'metrics ')
  [ -n "$url" ] || { echo "?"; return; }
  timeout 5 curl -s "$url" | awk '$1 == "npamp_dropped_total" { print $2; f = 1 } END { if (!f) print "?" }'
}

rm -rf "$OUT/logs"; mkdir -p "$OUT/logs"
[ -n "${NO_BUILD:-}" ] || cargo build --release -q -p npamp-gateway-cli
GW=${GATEWAY_BINARY:-target/release/npamp-gateway}

timeout 120 python3 -m venv "$TMP/venv"
timeout 300 "$TMP/venv/bin/pip" install -q "mcp==2.3.0" "uvicorn" >"$TMP/pip.log" 2>&1 ||
  { cat "$TMP/pip.log"; exit 1; }
PY="$TMP/venv/bin/python"

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- src cli 2>/dev/null || echo ' (src or cli modified)')"
  echo "machine: $(nproc) vCPU, $(uname -sr), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
  echo "python: $("$PY" --version 2>&1)"
  "$TMP/venv/bin/pip" freeze 2>/dev/null | grep -iE '^(mcp|mcp-types|uvicorn|httpx2|starlette)=' || true
} >"$OUT/machine.txt"

"$GW" keygen --out "$TMP/origin.key" >"$TMP/origin.pub"
"$GW" keygen --out "$TMP/edge.key" >"$TMP/edge.pub"

declare -A URL
for server in dual legacy; do
  start "server-$server" "^serving " "$PY" "$OUT/server.py" 0 "$server"
  URL[$server/direct]=$(field "server-$server" "serving ")
  for carrier in quic tls; do
    start "origin-$server-$carrier" "^listening on" env RUST_LOG=debug "$GW" serve \
      --listen "$carrier://127.0.0.1:0" --protocol mcp --upstream "${URL[$server/direct]}" \
      --identity "$TMP/origin.key" --trust "$(cat "$TMP/edge.pub")" --metrics 127.0.0.1:0
    start "edge-$server-$carrier" "^ingress" env RUST_LOG=debug "$GW" serve \
      --ingress http://127.0.0.1:0 --protocol mcp \
      --peer "$(field "origin-$server-$carrier" 'listening on ')" \
      --identity "$TMP/edge.key" --trust "$(cat "$TMP/origin.pub")" --metrics 127.0.0.1:0
    URL[$server/$carrier]="$(field "edge-$server-$carrier" 'ingress ')/mcp"
  done
done

: >"$OUT/steps.tsv"; : >"$OUT/dropped.tsv"
for server in dual legacy; do
  for mode in legacy auto 2026-07-28; do
    for path in direct quic tls; do
      run="$server-$mode-$path"
      if [ "$path" != direct ]; then
        e0=$(dropped "edge-$server-$path"); o0=$(dropped "origin-$server-$path")
      fi
      echo "== server=$server mode=$mode path=$path url=${URL[$server/$path]}" | sed 's|http://127.0.0.1:[0-9]*|http://127.0.0.1:PORT|'
      timeout 200 "$PY" "$OUT/client.py" "${URL[$server/$path]}" "$mode" "$OUT/logs/http-$run.log" \
        >"$TMP/$run.out" 2>"$OUT/logs/client-$run.err" || true
      cat "$TMP/$run.out"
      grep '^STEP ' "$TMP/$run.out" | while read -r _ step verdict detail; do
        printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$server" "$mode" "$path" "$step" "$verdict" "$detail"
      done >>"$OUT/steps.tsv"
      if [ "$path" != direct ]; then
        e1=$(dropped "edge-$server-$path"); o1=$(dropped "origin-$server-$path")
        printf '%s\tedge npamp_dropped_total %s -> %s\torigin npamp_dropped_total %s -> %s\n' \
          "$run" "$e0" "$e1" "$o0" "$o1" | tee -a "$OUT/dropped.tsv"
      fi
    done
  done
done
# Raw exchanges (curl) against the dual server, direct and through each pair: what a 2026-07-28
# server answers that the SDK's client steps above do not show.
META='"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"curl","version":"0"},"io.modelcontextprotocol/clientCapabilities":{}}'
META_NEW=${META//2026-07-28/2099-01-01}
raw() { # raw NAME PATH BODY HEADER...: one POST, status, content type and body head to raw.tsv
  local name=$1 path=$2 body=$3; shift 3
  local h=() x
  for x in "$@"; do h+=(-H "$x"); done
  rm -f "$TMP/raw.body" "$TMP/raw.head"; touch "$TMP/raw.body" "$TMP/raw.head"
  timeout 10 curl -s -o "$TMP/raw.body" -D "$TMP/raw.head" --max-time 4 -X POST "${URL[dual/$path]}" \
    -H 'content-type: application/json' -H 'accept: application/json, text/event-stream' \
    ${h[@]+"${h[@]}"} -d "$body" || true
  local status ctype head
  status=$(awk 'NR == 1 { print $2 }' "$TMP/raw.head")
  ctype=$(awk 'tolower($1) == "content-type:" { print $2 }' "$TMP/raw.head" | tr -d '\r;')
  head=$(tr '\n\r' '  ' <"$TMP/raw.body" | cut -c1-400)
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$path" "${status:-none}" "${ctype:-none}" "$head" | tee -a "$OUT/raw.tsv"
}
: >"$OUT/raw.tsv"
for path in direct quic tls; do
  raw header-mismatch "$path" \
    '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":2},'"$META"'}}' \
    'mcp-protocol-version: 2026-07-28' 'mcp-method: tools/list'
  raw unsupported-version "$path" '{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{'"$META_NEW"'}}' \
    'mcp-protocol-version: 2099-01-01' 'mcp-method: tools/list'
  raw progress-stream "$path" \
    '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"slow_steps","arguments":{},"_meta":{"progressToken":"p1",'"${META#'"_meta":{'}"'}}' \
    'mcp-protocol-version: 2026-07-28' 'mcp-method: tools/call' 'mcp-name: slow_steps'
  raw subscriptions-listen "$path" '{"jsonrpc":"2.0","id":4,"method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true},'"$META"'}}' \
    'mcp-protocol-version: 2026-07-28' 'mcp-method: subscriptions/listen'
done

# Ports change from run to run: write them as PORT in what is kept.
sed -i -E 's|127\.0\.0\.1:[0-9]+|127.0.0.1:PORT|g' "$OUT/steps.tsv" "$OUT/raw.tsv" "$OUT"/logs/*

python3 - "$OUT" <<'PY' | tee "$OUT/table.md"
import collections, sys
out = sys.argv[1]
rows = [l.rstrip("\n").split("\t") for l in open(f"{out}/steps.tsv") if l.strip()]
v = {(s, m, p, st): verdict for s, m, p, st, verdict, *_ in rows}
steps = ["connect", "list_tools", "call_add", "progress", "read_resource", "get_prompt", "listen", "revision"]
detail = {(s, m, p, st): (d[0] if d else "") for s, m, p, st, verdict, *d in rows}
for server in ["dual", "legacy"]:
    print(f"### server `{server}`\n")
    print("| mode | step | direct | QUIC pair | TLS pair |")
    print("|---|---|---|---|---|")
    for mode in ["legacy", "auto", "2026-07-28"]:
        for st in steps:
            if st == "revision" and mode == "legacy":
                continue
            if st == "listen" and not any((server, mode, p, st) in v for p in ["direct", "quic", "tls"]):
                continue
            cells = []
            for p in ["direct", "quic", "tls"]:
                x = v.get((server, mode, p, st), "—")
                if st == "revision":
                    x = f"{x} ({detail.get((server, mode, p, st), '').replace('ended_on=', '')})"
                cells.append(x)
            print(f"| {mode} | {st} | " + " | ".join(cells) + " |")
    print()
tot = collections.Counter()
for (s, m, p, st), x in v.items():
    tot[(p, x)] += 1
print("totals: " + ", ".join(f"{p} {tot[(p, 'PASS')]}/{tot[(p, 'PASS')] + tot[(p, 'FAIL')]} PASS" for p in ["direct", "quic", "tls"]))
regress = [(s, m, p, st) for (s, m, p, st), x in v.items() if p != "direct" and x == "FAIL" and v.get((s, m, "direct", st)) == "PASS"]
print(f"steps that pass direct and fail through a pair: {len(regress)}")
PY
