#!/usr/bin/env bash
# npamp-loadgen capacity with --trials 3 (each rate measured three times,
# passing when two do), three searches each against the two targets of
# results/2026-12-01-capacity (one trial per rate there), to see whether the
# knee now repeats within 10 %. Same scenario, SLO and steps as there. Run
# from the repository root:
#   bash results/2026-12-02-capacity-trials/run.sh [OUT]
set -euo pipefail
source results/lib.sh
out=${1:-results/2026-12-02-capacity-trials}
slo="p99<20ms,errors<0.1%"
args=(--slo "$slo" --start 1000 --step 5s --warmup 1s --precision 5 --trials 3)
bash results/machine-info.sh "bash results/2026-12-02-capacity-trials/run.sh" > "$out/machine.txt"
start mock "mock upstream" "$LG" upstream --listen http://127.0.0.1:0
mock=$(field mock "mock upstream ")
for target in mock pair; do
  for i in 1 2 3; do
    mkdir -p "$out/$target-$i"
    t=()
    [[ $target == mock ]] && t=(--target "$mock/")
    "$LG" capacity scenarios/quickstart.toml "${t[@]}" "${args[@]}" \
      --out "$out/$target-$i" > "$out/$target-$i/table.txt" 2> "$out/$target-$i/steps.txt" \
      || true
    echo "$target-$i: $(tail -n 1 "$out/$target-$i/table.txt")"
  done
done
if command -v chromium >/dev/null; then
  chromium --headless --no-sandbox --disable-gpu --no-first-run --window-size=860,1400 \
    --screenshot="$out/mock-1.png" "file://$PWD/$out/mock-1/report.html" 2>/dev/null
fi
