#!/usr/bin/env bash
# npamp-loadgen capacity, three times each against two targets, to see
# whether the knee repeats: the mock upstream directly (HTTP, echo), and
# the embedded gateway pair (mock, origin and edge in the generator's own
# process, N-PAMP over QUIC). Same SLO, same scenario, same machine, one
# after the other; then screenshots (headless Chromium) of a capacity
# report and of a run's report. Run from the repository root:
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
# Screenshots of the reports, as a browser draws them.
mkdir -p "$out/run"
"$LG" run scenarios/ramp-to-saturation.toml --quiet \
  --out "$out/run" > "$out/run/table.txt" 2>/dev/null || true
if command -v chromium >/dev/null; then
  for page in mock-1/report.html run/report.html; do
    chromium --headless --no-sandbox --disable-gpu --no-first-run --window-size=860,2400 \
      --screenshot="$out/${page%%/*}.png" "file://$PWD/$out/$page" 2>/dev/null
  done
fi
