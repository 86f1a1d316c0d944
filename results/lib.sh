# Shared by the result scripts that start gateway processes (sourced from
# the repository root): builds both binaries, names them ($GW, $LG), gives a
# temporary directory ($TMP) and kills every process `start` began when the
# script exits.
cargo build --release -q -p npamp-gateway-cli -p npamp-loadgen
GW=target/release/npamp-gateway
LG=target/release/npamp-loadgen
TMP=$(mktemp -d)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; rm -rf "$TMP"; }
trap cleanup EXIT

# start NAME READY COMMAND...: runs COMMAND in the background (stdout in
# $TMP/NAME.out, stderr in $TMP/NAME.err, its pid in ${NAME}_pid with `-`
# read as `_`) and waits, 10 s at most, for a stdout line matching the
# regex READY.
start() {
  local name=$1 ready=$2; shift 2
  "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" &
  pids+=($!)
  printf -v "${name//-/_}_pid" %s $!
  for _ in $(seq 200); do
    grep -qsE "$ready" "$TMP/$name.out" && return 0
    sleep 0.05
  done
  echo "$name did not start:"; cat "$TMP/$name.err"; exit 1
}

# field NAME PREFIX: the rest of NAME's first stdout line starting with PREFIX.
field() { grep -m1 "^$2" "$TMP/$1.out" | sed "s|^$2||"; }
