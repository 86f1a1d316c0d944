#!/usr/bin/env bash
# npamp-loadgen capacity, three times each against two targets, to see
# whether the knee repeats: the mock upstream directly (HTTP, echo), and
# the embedded gateway pair (mock, origin and edge in the generator's own
# process, N-PAMP over QUIC). Same SLO, same scenario, same machine, one
# after the other. Run from the repository root:
#   bash results/2026-12-01-capacity/run.sh [OUT]
set -euo pipefail
source results/lib.sh
out=${1:-results/2026-12-01-capacity}
slo="p99<20ms,errors<0.1%"
args=(--slo "$slo" --start 1000 --step 5s --warmup 1s --precision 5)
bash results/machine-info.sh "bash results/2026-12-01-capacity/run.sh" > "$out/machine.txt"
start mock "mock upstream" "$LG" upstream --listen http://127.0.0.1:0
mock=$(field mock "mock upstream ")
for i in 1 2 3; do
  mkdir -p "$out/mock-$i"
  "$LG" capacity scenarios/quickstart.toml --target "$mock/" "${args[@]}" \
    --out "$out/mock-$i" > "$out/mock-$i/table.txt" 2> "$out/mock-$i/steps.txt" \
    || true
  tail -n 1 "$out/mock-$i/table.txt"
done
for i in 1 2 3; do
  mkdir -p "$out/pair-$i"
  "$LG" capacity scenarios/quickstart.toml "${args[@]}" \
    --out "$out/pair-$i" > "$out/pair-$i/table.txt" 2> "$out/pair-$i/steps.txt" \
    || true
  tail -n 1 "$out/pair-$i/table.txt"
done
