# Shared by the scripts that run builds of npamp-gateway side by side
# (run-build-ab.sh, 2026-12-03-quic-ack-frequency/counts.sh; sourced from the
# repository root): a temporary directory ($TMP), one static nginx upstream
# on 127.0.0.1:$UP_PORT answering every POST with a fixed JSON-RPC reply,
# wrk's request script $TMP/post.lua, and `gateway_pair`. Every process
# started is killed when the script exits. Needs Debian's nginx-light and wrk.
for tool in nginx wrk; do
  command -v $tool >/dev/null || { echo "$tool is not installed (apt-get install nginx-light wrk)"; exit 1; }
done
TMP=$(mktemp -d); NGX=$(mktemp -d); chmod 755 "$NGX"
source results/procs.sh
cleanup() { kill "${pids[@]}" 2>/dev/null || true; [ -f "$NGX/static.pid" ] && kill "$(cat "$NGX/static.pid")" 2>/dev/null; rm -rf "$TMP" "$NGX"; }
trap cleanup EXIT
WORKERS=$(nproc)
source results/nginx.sh
UP_PORT=$(free_port)
nginx_static "$UP_PORT"
cat > "$TMP/post.lua" <<'LUA'
wrk.method = "POST"
wrk.body = '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}'
wrk.headers["Content-Type"] = "application/json"
LUA

# gateway_pair NAME BINARY: a gateway pair of BINARY over $TRANSPORT (quic,
# the default, or tls; edge HTTP ingress -> origin) in front of the static
# upstream, each with a fresh identity: pids in ${NAME}_origin_pid and
# ${NAME}_edge_pid, the edge's ingress URL in ${NAME}_url.
TRANSPORT=${TRANSPORT:-quic}
case $TRANSPORT in quic|tls) ;; *) echo "TRANSPORT must be quic or tls, not $TRANSPORT"; exit 2;; esac
gateway_pair() {
  local name=$1 bin=$2 opub epub peer
  opub=$("$bin" keygen --out "$TMP/$name-origin.key" --force)
  epub=$("$bin" keygen --out "$TMP/$name-edge.key" --force)
  start "${name}_origin" '^listening on' "$bin" serve --listen "$TRANSPORT://127.0.0.1:0" \
    --upstream "http://127.0.0.1:$UP_PORT" --identity "$TMP/$name-origin.key" --trust "$epub"
  peer=$(grep -m1 '^listening on' "$TMP/${name}_origin.out" | sed 's/^listening on //')
  start "${name}_edge" '^ingress' "$bin" serve --ingress http://127.0.0.1:0 --peer "$peer" \
    --identity "$TMP/$name-edge.key" --trust "$opub"
  printf -v "${name}_url" %s "$(grep -m1 '^ingress' "$TMP/${name}_edge.out" | sed 's/^ingress //')/"
}

# build_names BINARY...: the binaries' file names, for a command line in
# machine.txt that names builds, not paths of this machine.
build_names() { local b; for b in "$@"; do printf '%s ' "$(basename "$b")"; done; }
