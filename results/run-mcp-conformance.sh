#!/usr/bin/env bash
# The official MCP conformance suite's server scenarios against the MCP
# reference server (@modelcontextprotocol/server-everything), once direct
# (its Streamable HTTP transport) and once through a gateway pair (an edge
# with an MCP HTTP ingress, an origin running the same server as its stdio
# child), for one or more builds of the gateway in turn. Writes
# OUT/BUILD.txt and OUT/direct.txt (the suite's own report) and
# OUT/table.md.
#   [SCENARIOS="dns-rebinding-protection"] [OUT=DIR] results/run-mcp-conformance.sh BINARY...
# Needs Node.js 22 or later (NODE=path/to/node, else `node` on PATH) and the
# npm registry, from which the suite and the server are installed into a
# temporary directory; loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: run-mcp-conformance.sh BINARY..."; exit 2; }
BINS=(); for b in "$@"; do BINS+=("$(realpath "$b")"); done
SCENARIOS=${SCENARIOS:-dns-rebinding-protection}
OUT=${OUT:-results/$(date -u +%Y-%m-%d)-mcp-conformance}
NODE=${NODE:-node}
major=$("$NODE" --version | sed 's/^v\([0-9]*\).*/\1/')
[ "$major" -ge 22 ] || { echo "the MCP conformance suite needs Node.js 22 or later, $NODE is $("$NODE" --version) (set NODE)"; exit 1; }
export PATH="$(dirname "$(command -v "$NODE")"):$PATH"
TMP=$(mktemp -d)
source results/procs.sh
source results/nginx.sh
cleanup() { kill "${pids[@]}" 2>/dev/null || true; rm -rf "$TMP"; }
trap cleanup EXIT
mkdir -p "$OUT" "$TMP/npm"
(cd "$TMP/npm" && npm init -y >/dev/null && npm install --no-audit --no-fund -q \
  @modelcontextprotocol/conformance @modelcontextprotocol/server-everything >/dev/null)
SUITE=$TMP/npm/node_modules/.bin/conformance
SERVER=$TMP/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js
versions=$(cd "$TMP/npm" && npm ls --depth=0 2>/dev/null | grep -o '@modelcontextprotocol/[a-z-]*@[0-9.]*' | tr '\n' ' ')
results/machine-info.sh "SCENARIOS=\"$SCENARIOS\" results/run-mcp-conformance.sh $(for b in "${BINS[@]}"; do printf '%s ' "$(basename "$b")"; done)" > "$OUT/machine.txt"
echo "node: $("$NODE" --version); npm packages: $versions" >> "$OUT/machine.txt"

# suite NAME URL: every scenario against URL, the report in OUT/NAME.txt,
# one line per scenario in $TMP/rows.
suite() {
  local name=$1 url=$2 s
  : > "$OUT/$name.txt"
  for s in $SCENARIOS; do
    echo "== $s" >> "$OUT/$name.txt"
    if NO_COLOR=1 "$SUITE" server --url "$url" --scenario "$s" > "$TMP/report" 2>&1; then
      printf '%s\t%s\tpassed\n' "$name" "$s" >> "$TMP/rows"
    else
      printf '%s\t%s\tFAILED\n' "$name" "$s" >> "$TMP/rows"
    fi
    # Its colours taken out, the URL's port too (a new one each run).
    sed -e 's/\x1b\[[0-9;]*m//g' -e 's|http://127.0.0.1:[0-9]*|http://127.0.0.1:PORT|' "$TMP/report" >> "$OUT/$name.txt"
  done
}

: > "$TMP/rows"
port=$(free_port)
# The server says it listens on stderr.
PORT=$port "$NODE" "$SERVER" streamableHttp > "$TMP/direct.out" 2> "$TMP/direct.err" &
direct_pid=$!; pids+=("$direct_pid")
for _ in $(seq 100); do grep -qs "listening on port" "$TMP/direct.err" && break; sleep 0.1; done
suite direct "http://127.0.0.1:$port/mcp"
kill "$direct_pid" 2>/dev/null || true

for bin in "${BINS[@]}"; do
  build=$(basename "$bin")
  opub=$("$bin" keygen --out "$TMP/origin.key" --force)
  epub=$("$bin" keygen --out "$TMP/edge.key" --force)
  start origin '^listening on' "$bin" serve --listen quic://127.0.0.1:0 --protocol mcp \
    --upstream-cmd "$NODE $SERVER stdio" --identity "$TMP/origin.key" --trust "$epub"
  peer=$(grep -m1 '^listening on' "$TMP/origin.out" | sed 's/^listening on //')
  start edge '^ingress' "$bin" serve --ingress http://127.0.0.1:0 --protocol mcp --peer "$peer" \
    --identity "$TMP/edge.key" --trust "$opub"
  url=$(grep -m1 '^ingress http' "$TMP/edge.out" | sed 's/^ingress //')/
  suite "$build" "$url"
  kill "$edge_pid" "$origin_pid" 2>/dev/null || true
  wait "$edge_pid" "$origin_pid" 2>/dev/null || true
done

{
  echo "| where | scenario | result |"
  echo "|---|---|---|"
  awk -F'\t' '{ printf "| %s | %s | %s |\n", ($1 == "direct" ? "direct (the reference server alone)" : "through a pair of " $1), $2, $3 }' "$TMP/rows"
} > "$OUT/table.md"
cat "$OUT/table.md"
