#!/usr/bin/env bash
# npamp-loadgen capacity three times in a row against each of the two
# targets of results/2026-12-01-capacity (same scenario, SLO, step length
# and precision), but starting each search near where those runs found the
# knee, so a search takes 7 steps instead of 11 and three searches fit in a
# couple of minutes: does the knee repeat within 10 % when the machine has
# less time to drift between the searches? Run from the repository root:
#   bash results/2026-12-02-capacity-near/run.sh [OUT]
set -euo pipefail
out=${1:-results/2026-12-02-capacity-near}
cargo build --release -q -p npamp-loadgen
LG=target/release/npamp-loadgen
slo="p99<20ms,errors<0.1%"
args=(--slo "$slo" --step 5s --warmup 1s --precision 5)
bash results/machine-info.sh "bash results/2026-12-02-capacity-near/run.sh" > "$out/machine.txt"
"$LG" upstream --listen http://127.0.0.1:0 > "$out/.mock.out" 2>/dev/null &
mock_pid=$!
trap 'kill $mock_pid 2>/dev/null || true; rm -f "$out/.mock.out"' EXIT
for _ in $(seq 100); do grep -qs "^mock upstream " "$out/.mock.out" && break; sleep 0.05; done
mock=$(grep -m1 "^mock upstream " "$out/.mock.out" | sed "s|^mock upstream ||")
for target in mock pair; do
  for i in 1 2 3; do
    mkdir -p "$out/$target-$i"
    if [[ $target == mock ]]; then t=(--target "$mock/" --start 16000); else t=(--start 2000); fi
    "$LG" capacity scenarios/quickstart.toml "${t[@]}" "${args[@]}" \
      --out "$out/$target-$i" > "$out/$target-$i/table.txt" 2> "$out/$target-$i/steps.txt" \
      || true
    echo "$target-$i: $(tail -n 1 "$out/$target-$i/table.txt")"
  done
done
