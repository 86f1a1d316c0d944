#!/usr/bin/env bash
# The load generator's own maximum request rate against wrk's, side by side
# in one run, both against the mock upstream on 127.0.0.1: wrk with N
# threads and one connection each (-tN -cN), npamp-loadgen closed loop with
# N requests in flight on N connections; N = 1 and 2. The mock is pinned to
# the last core, the tools to the others. Then the open loop at
# a rate below capacity: the achieved rate against the target.
# Needs Debian's wrk (`apt-get install wrk`).
#   results/run-loadgen-vs-wrk.sh [SECONDS]   (each round; default 10)
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-10}
OUT=results/$(date -u +%Y-%m-%d)-loadgen-vs-wrk
mkdir -p "$OUT"
command -v wrk >/dev/null || { echo "wrk is not installed (apt-get install wrk)"; exit 1; }
cargo build --release -q -p npamp-loadgen
LG=target/release/npamp-loadgen
TMP=$(mktemp -d)
# The mock on the last core, the tool under test on the others (on a
# 2-core machine: one each), so the two tools compete with the mock the
# same way and the scheduler's placement does not decide the comparison.
LAST=$(( $(nproc) - 1 ))
TOOL_CPUS=0-$(( LAST > 0 ? LAST - 1 : 0 ))
taskset -c "$LAST" "$LG" upstream --listen http://127.0.0.1:0 >"$TMP/mock.out" 2>&1 &
MOCK_PID=$!
trap 'kill $MOCK_PID 2>/dev/null; rm -rf "$TMP"' EXIT
for _ in $(seq 50); do grep -q "mock upstream" "$TMP/mock.out" && break; sleep 0.1; done
URL=$(sed -n 's/^mock upstream //p' "$TMP/mock.out")/
results/machine-info.sh "results/run-loadgen-vs-wrk.sh $SECONDS_EACH" >"$OUT/machine.txt"
echo "wrk: $(wrk --version 2>&1 | head -1)" >>"$OUT/machine.txt"
# Seven alternating rounds per N (wrk, loadgen, wrk, loadgen, ...): the
# machine is shared and noisy, so the medians are compared.
{
  echo "| workers | wrk req/s (7 rounds) | npamp-loadgen req/s (7 rounds) | median loadgen / median wrk |"
  echo "|---|---|---|---|"
  for n in 1 2; do
    ws=(); ls=()
    for round in 1 2 3 4 5 6 7; do
      taskset -c "$TOOL_CPUS" wrk -t"$n" -c"$n" -d"${SECONDS_EACH}s" -s results/wrk/post-echo.lua "$URL" >"$OUT/wrk-$n-$round.txt"
      ws+=("$(awk '/Requests\/sec/ {print $2}' "$OUT/wrk-$n-$round.txt")")
      taskset -c "$TOOL_CPUS" "$LG" run scenarios/closed-64.toml --target "$URL" --concurrency "$n" --connections "$n" \
        --duration "$SECONDS_EACH" --quiet --out "$OUT/loadgen-$n-$round" >"$OUT/loadgen-$n-$round.txt"
      ls+=("$(python3 -c "import json; print(round(json.load(open('$OUT/loadgen-$n-$round/summary.json'))['throughput']))")")
    done
    python3 - "$n" "${ws[*]}" "${ls[*]}" <<'PY'
import statistics, sys
n, w, l = sys.argv[1], [float(x) for x in sys.argv[2].split()], [float(x) for x in sys.argv[3].split()]
mw, ml = statistics.median(w), statistics.median(l)
print(f"| {n} | {' / '.join(f'{x:.0f}' for x in w)} | {' / '.join(f'{x:.0f}' for x in l)} | {ml / mw:.2f} |")
PY
  done
} | tee "$OUT/max-rate.md"
# Below capacity: the achieved rate must be within 1 % of the target.
{
  echo
  echo "| target req/s | achieved replies/s | achieved / target | lost | duplicated | mismatched |"
  echo "|---|---|---|---|---|---|"
  for rate in 1000 5000; do
    "$LG" run scenarios/quickstart.toml --target "$URL" --rate "$rate" --duration "$SECONDS_EACH" \
      --connections 16 --quiet --out "$OUT/open-$rate" >"$OUT/open-$rate.txt" || true
    python3 - "$OUT/open-$rate/summary.json" "$rate" <<'PY'
import json, sys
s = json.load(open(sys.argv[1])); rate = float(sys.argv[2]); a = s["accounting"]
print(f"| {rate:.0f} | {s['throughput']:.1f} | {s['throughput']/rate:.4f} | {a['lost']} | {a['duplicated']} | {a['mismatched']} |")
PY
  done
} | tee -a "$OUT/max-rate.md"
