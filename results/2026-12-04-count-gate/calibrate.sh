#!/usr/bin/env bash
# Runs .ci/count-gate.sh on several builds of npamp-gateway in turn, ROUNDS
# (6) times, and keeps every table it prints (the gate's verdict is not the
# point here: the counts are). Each build is a binary; the patches beside
# this file make the regressed builds the ceilings were chosen against
# (git apply PATCH; cargo build --release -p npamp-gateway-cli).
#   [ROUNDS=6] results/2026-12-04-count-gate/calibrate.sh NAME=BINARY...
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${ROUNDS:-6}
for round in $(seq "$ROUNDS"); do
  for nb in "$@"; do
    name=${nb%%=*}; bin=$(realpath "${nb#*=}")
    echo "== round $round: $name"
    GATEWAY_BINARY=$bin bash .ci/count-gate.sh | grep -E '^ +(4|32) ' | head -n 2 || true
  done
done
