#!/usr/bin/env bash
# Issue 54, item 1: every figure by intended send time, and --duration
# bounding an overloaded run. Against the mock upstream directly (HTTP,
# echo): the 1k/5k/40k ramp (ramp.toml), whose stage rows must equal the
# schedule (2000 / 10000 / 120000 requests), then one rate far above what
# the mock and the generator can do on this machine for 5 s, which must end
# at 5 s plus its drain (the scenario's timeout, 5 s, plus 1 s) at most and
# count what it could not send as dropped. Run from the repository root:
#   bash results/2026-12-06-loadgen-send-time/run.sh [OUT]
set -euo pipefail
source results/lib.sh
out=${1:-results/2026-12-06-loadgen-send-time}
bash results/machine-info.sh "bash results/2026-12-06-loadgen-send-time/run.sh" > "$out/machine.txt"
start mock "mock upstream" "$LG" upstream --listen http://127.0.0.1:0
mock=$(field mock "mock upstream ")
mkdir -p "$out/ramp" "$out/overload"
"$LG" run "$out/ramp.toml" --target "$mock/" --quiet \
  --out "$out/ramp" > "$out/ramp/table.txt" 2>/dev/null || echo "ramp: exit $?"
began=$(date +%s.%N)
"$LG" run "$out/ramp.toml" --target "$mock/" --rate 100000 --duration 5s --quiet \
  --out "$out/overload" > "$out/overload/table.txt" 2>/dev/null || echo "overload: exit $?"
ended=$(date +%s.%N)
echo "overload wall time: $(python3 -c "print(round($ended - $began, 2))") s" | tee "$out/overload/wall.txt"
