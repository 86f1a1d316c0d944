#!/usr/bin/env bash
# As results/2026-12-02-capacity-near, against the mock only, with the
# mock and the load generator each pinned to a core of its own (taskset):
# does the knee repeat when they no longer take each other's core?
# Run from the repository root:
#   bash results/2026-12-02-capacity-pinned/run.sh [OUT]
set -euo pipefail
out=${1:-results/2026-12-02-capacity-pinned}
cargo build --release -q -p npamp-loadgen
LG=target/release/npamp-loadgen
slo="p99<20ms,errors<0.1%"
args=(--slo "$slo" --step 5s --warmup 1s --precision 5)
bash results/machine-info.sh "bash results/2026-12-02-capacity-pinned/run.sh" > "$out/machine.txt"
taskset -c 1 "$LG" upstream --listen http://127.0.0.1:0 > "$out/.mock.out" 2>/dev/null &
mock_pid=$!
trap 'kill $mock_pid 2>/dev/null || true; rm -f "$out/.mock.out"' EXIT
for _ in $(seq 100); do grep -qs "^mock upstream " "$out/.mock.out" && break; sleep 0.05; done
mock=$(grep -m1 "^mock upstream " "$out/.mock.out" | sed "s|^mock upstream ||")
for target in mock; do
  for i in 1 2 3; do
    mkdir -p "$out/$target-$i"
    if [[ $target == mock ]]; then t=(--target "$mock/" --start 8000); else t=(--start 2000); fi
    taskset -c 0 "$LG" capacity scenarios/quickstart.toml "${t[@]}" "${args[@]}" \
      --out "$out/$target-$i" > "$out/$target-$i/table.txt" 2> "$out/$target-$i/steps.txt" \
      || true
    echo "$target-$i: $(tail -n 1 "$out/$target-$i/table.txt")"
  done
done
