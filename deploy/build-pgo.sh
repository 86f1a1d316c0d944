#!/usr/bin/env bash
# Builds npamp-gateway with profile-guided optimisation (PGO) on top of the
# release profile's whole-program optimisation, for a production binary:
#
#   1. an instrumented build, which counts how often each branch and call
#      of the program is taken;
#   2. a training run of that build on loopback: a mock upstream, an origin
#      and an edge (over QUIC, then over TCP + TLS), and npamp-loadgen
#      through the edge's HTTP, WebSocket and TCP ingresses, closed loop
#      at 1, 4 and 32 in flight (about a minute);
#   3. the release build again, laid out and inlined by those counts.
#
# The binary: target/pgo/release/npamp-gateway (the load generator is not
# rebuilt; use target/release/npamp-loadgen). What it gained on this
# project's own loopback benchmark is in results/2026-12-05-pgo/.
#
# Needs the Rust toolchain and its llvm-tools component, for llvm-profdata
# of the compiler's LLVM version (added with rustup when it is missing and
# rustup is there). Nothing else: the upstream and the load are this project's
# own (`npamp-gateway mock-upstream`, `npamp-loadgen`). Only 127.0.0.1 is
# used.
#   deploy/build-pgo.sh [SECONDS_PER_POINT (3)]
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-3}

host=$(rustc -vV | sed -n 's/^host: //p')
find_profdata() { find "$(rustc --print sysroot)/lib/rustlib" -name llvm-profdata -type f 2>/dev/null | head -n 1; }
profdata=$(find_profdata)
if [ -z "$profdata" ] && command -v rustup >/dev/null; then
  rustup component add llvm-tools
  profdata=$(find_profdata)
fi
if [ -z "$profdata" ]; then
  echo "llvm-profdata not found in the toolchain: rustup component add llvm-tools"
  exit 1
fi

work=$PWD/target/pgo
profiles=$work/profiles
rm -rf "$profiles" "$work/merged.profdata"
mkdir -p "$profiles"

# --target: RUSTFLAGS then reach the program only, not build scripts and
# procedural macros (which would write profiles of their own while building).
echo "== 1/3: instrumented build"
RUSTFLAGS="-Cprofile-generate=$profiles" \
  cargo build --release --locked -q -p npamp-gateway-cli --target "$host" --target-dir "$work/instrumented"
cargo build --release --locked -q -p npamp-loadgen
gw=$work/instrumented/$host/release/npamp-gateway
lg=target/release/npamp-loadgen

echo "== 2/3: training run"
tmp=$(mktemp -d)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT

# start NAME READY-REGEX COMMAND...: COMMAND in the background, waiting
# (10 s at most) for a line of its stdout that matches.
start() {
  local name=$1 ready=$2
  shift 2
  "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
  pids+=("$!")
  for _ in $(seq 200); do
    grep -qsE "$ready" "$tmp/$name.out" && return 0
    sleep 0.05
  done
  echo "$name did not start:"
  cat "$tmp/$name.err"
  exit 1
}
# line NAME PREFIX: the rest of NAME's first stdout line that starts with PREFIX.
line() { grep -m1 "^$2" "$tmp/$1.out" | sed "s|^$2||"; }

cat >"$tmp/train.toml" <<'TOML'
name = "pgo-training"
description = "closed loop of small echo requests"
duration = 3
warmup = 0
connections = 4
timeout = 5

[load]
model = "closed"
concurrency = 4

[mix]
[[mix.message]]
method = "echo"
params = '{"n": {seq}, "tag": "{hex:8}"}'

[slo]
max_error_rate = 0.0
TOML

start mock 'mock upstream tcp://' "$gw" mock-upstream \
  --listen http://127.0.0.1:0 --listen ws://127.0.0.1:0 --listen tcp://127.0.0.1:0
upstream=$(line mock 'mock upstream http://')
opub=$("$gw" keygen --out "$tmp/origin.key" --force)
epub=$("$gw" keygen --out "$tmp/edge.key" --force)

for transport in quic tls; do
  start "origin-$transport" '^listening on' "$gw" serve --listen "$transport://127.0.0.1:0" \
    --upstream "http://$upstream" --identity "$tmp/origin.key" --trust "$epub"
  peer=$(line "origin-$transport" 'listening on ')
  start "edge-$transport" '^ingress tcp://' "$gw" serve --peer "$peer" \
    --ingress http://127.0.0.1:0 --ingress ws://127.0.0.1:0 --ingress tcp://127.0.0.1:0 \
    --identity "$tmp/edge.key" --trust "$opub"
  for ingress in http ws tcp; do
    target=$(line "edge-$transport" "ingress $ingress://")
    for in_flight in 1 4 32; do
      echo "   $transport, $ingress ingress, $in_flight in flight"
      "$lg" run "$tmp/train.toml" --target "$ingress://$target" --duration "${SECS}s" \
        --connections "$in_flight" --concurrency "$in_flight" --quiet >"$tmp/run.out" 2>&1 ||
        { echo "the training load failed:"; cat "$tmp/run.out"; exit 1; }
    done
  done
done

# A gateway writes its profile when it exits: SIGTERM, then wait for the
# drain (a gateway that does not exit in 20 s fails the build).
kill -TERM "${pids[@]}"
for pid in "${pids[@]}"; do
  for _ in $(seq 400); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "process $pid did not exit on SIGTERM within 20 s; its profile is lost"
    exit 1
  fi
done
pids=()
"$profdata" merge -o "$work/merged.profdata" "$profiles"

echo "== 3/3: optimised build"
RUSTFLAGS="-Cprofile-use=$work/merged.profdata" \
  cargo build --release --locked -q -p npamp-gateway-cli --target "$host" --target-dir "$work/optimised"
mkdir -p "$work/release"
cp "$work/optimised/$host/release/npamp-gateway" "$work/release/npamp-gateway"
echo "built: target/pgo/release/npamp-gateway"
