# Shared by the CI gates that load a gateway pair (sourced from the
# repository root): release builds of the gateway and the load generator,
# the load generator's mock upstream, and a gateway pair over QUIC in front
# of it (edge HTTP ingress -> origin -> mock), each with a fresh identity.
# GATEWAY_BINARY=PATH runs another build of the gateway. Sets GW, LG, TMP,
# mock (the mock's URL), edge (the edge's ingress URL), mock_pid,
# origin_pid and edge_pid; every process it starts is killed when the
# sourcing script exits.
cargo build --release -q -p npamp-gateway-cli -p npamp-loadgen
GW=${GATEWAY_BINARY:-target/release/npamp-gateway}; LG=target/release/npamp-loadgen
TMP=$(mktemp -d)
# start NAME READY COMMAND... (its pid in NAME_pid, every pid in pids).
# The processes stay in this script's session, as they were when the floor
# and the ceilings were measured (.ci/perf-floor, .ci/count-ceilings): a
# session of their own moves the counts (results/2026-12-05-sessions/).
START_SESSION=shared
source results/procs.sh
cleanup() { kill "${pids[@]}" 2>/dev/null || true; rm -rf "$TMP"; }
trap cleanup EXIT
start mock '^mock upstream' "$LG" upstream --listen http://127.0.0.1:0
mock=$(grep -m1 '^mock upstream' "$TMP/mock.out" | sed 's/^mock upstream //')
opub=$("$GW" keygen --out "$TMP/origin.key"); epub=$("$GW" keygen --out "$TMP/edge.key")
start origin '^listening on' "$GW" serve --listen quic://127.0.0.1:0 --upstream "$mock" \
  --identity "$TMP/origin.key" --trust "$epub"
peer=$(grep -m1 '^listening on' "$TMP/origin.out" | sed 's/^listening on //')
start edge '^ingress' "$GW" serve --ingress http://127.0.0.1:0 --peer "$peer" \
  --identity "$TMP/edge.key" --trust "$opub"
edge=$(grep -m1 '^ingress' "$TMP/edge.out" | sed 's/^ingress //')
