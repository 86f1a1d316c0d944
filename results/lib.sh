# Shared by the result scripts that start gateway processes (sourced from
# the repository root): builds both binaries, names them ($GW, $LG), gives a
# temporary directory ($TMP) and kills every process `start` began when the
# script exits. GATEWAY_BINARY runs another build of the gateway instead of
# this checkout's (an earlier revision, to compare on the same day).
# NO_BUILD=1 builds nothing: on a machine without cargo, with GATEWAY_BINARY
# (and LOADGEN_BINARY, for the scripts that run the load generator) built
# elsewhere (results/portable/).
[ -n "${NO_BUILD:-}" ] || cargo build --release -q -p npamp-gateway-cli -p npamp-loadgen
GW=${GATEWAY_BINARY:-target/release/npamp-gateway}
LG=${LOADGEN_BINARY:-target/release/npamp-loadgen}
TMP=$(mktemp -d)
source results/procs.sh
cleanup() { kill "${pids[@]}" 2>/dev/null || true; rm -rf "$TMP"; }
trap cleanup EXIT

# field NAME PREFIX: the rest of NAME's first stdout line starting with PREFIX.
field() { grep -m1 "^$2" "$TMP/$1.out" | sed "s|^$2||"; }
