#!/usr/bin/env bash
# The load generator's cost per request against wrk's, and against its own
# earlier build, in one run: closed loop, 64 requests in flight on 64
# connections, against the mock upstream on 127.0.0.1; the mock pinned to
# the last core, each tool to core 0 (one core each, as wrk -t1). For each
# round and tool: replies per second, and CPU time (user + system, GNU
# time) per request. Rounds alternate wrk, before, now; medians compared.
# Needs Debian's wrk.
#   results/run-engine-cost.sh BEFORE_BIN OUT_DIR [SECONDS] [ROUNDS]
# Build BEFORE_BIN from a worktree of the earlier commit
# (`git worktree add /tmp/old REV && cd /tmp/old &&
#  CARGO_TARGET_DIR=/tmp/old-target cargo build --release -p npamp-loadgen`).
set -euo pipefail
cd "$(dirname "$0")/.."
BEFORE=$1 OUT=$2 SECONDS_EACH=${3:-10} ROUNDS=${4:-5}
command -v wrk >/dev/null || { echo "wrk is not installed (apt-get install wrk)"; exit 1; }
[ -n "${NO_BUILD:-}" ] || cargo build --release -q -p npamp-loadgen
NOW=target/release/npamp-loadgen
mkdir -p "$OUT"
TMP=$(mktemp -d)
LAST=$(( $(nproc) - 1 ))
taskset -c "$LAST" "$NOW" upstream --listen http://127.0.0.1:0 >"$TMP/mock.out" 2>&1 &
MOCK_PID=$!
trap 'kill $MOCK_PID 2>/dev/null; rm -rf "$TMP"' EXIT
for _ in $(seq 50); do grep -q "mock upstream" "$TMP/mock.out" && break; sleep 0.1; done
URL=$(sed -n 's/^mock upstream //p' "$TMP/mock.out")/
results/machine-info.sh "results/run-engine-cost.sh $BEFORE $OUT $SECONDS_EACH $ROUNDS" >"$OUT/machine.txt"
echo "wrk: $(wrk --version 2>&1 | head -1)" >>"$OUT/machine.txt"

# One round of TOOL: "REPLIES_PER_S CPU_US_PER_REQUEST".
round() {
  local tool=$1 dir=$2
  case $tool in
    wrk)
      /usr/bin/time -f "%U %S" -o "$dir.time" taskset -c 0 wrk -t1 -c64 -d"${SECONDS_EACH}s" \
        -s results/wrk/post-echo.lua "$URL" >"$dir.txt"
      python3 - "$dir.txt" "$dir.time" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
n = int(re.search(r"(\d+) requests in", text).group(1))
rate = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
u, s = map(float, open(sys.argv[2]).read().split()[-2:])
print(f"{rate:.0f} {(u + s) / n * 1e6:.2f}")
PY
      ;;
    *)
      local bin=$NOW; [ "$tool" = before ] && bin=$BEFORE
      /usr/bin/time -f "%U %S" -o "$dir.time" taskset -c 0 "$bin" run scenarios/closed-64.toml \
        --target "$URL" --duration "$SECONDS_EACH" --quiet --out "$dir" >"$dir.txt"
      python3 - "$dir/summary.json" "$dir.time" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
n = s["accounting"]["sent_requests"]
u, t = map(float, open(sys.argv[2]).read().split()[-2:])
print(f"{s['throughput']:.0f} {(u + t) / n * 1e6:.2f}")
PY
      # Keep each round's summary, not its reports and logs.
      find "$dir" -type f ! -name summary.json -delete
      ;;
  esac
}

declare -A RATES CPU
for r in $(seq "$ROUNDS"); do
  for tool in wrk before now; do
    read -r rate cpu < <(round "$tool" "$OUT/$tool-$r")
    RATES[$tool]+="$rate "
    CPU[$tool]+="$cpu "
    echo "round $r $tool: $rate replies/s, $cpu µs CPU per request"
  done
done | tee "$OUT/rounds.txt"
python3 - "$OUT/rounds.txt" <<'PY' | tee "$OUT/table.md"
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    m = re.match(r"round \d+ (\w+): (\d+) replies/s, ([\d.]+) ", line)
    if m:
        rows.setdefault(m.group(1), []).append((float(m.group(2)), float(m.group(3))))
print("| tool | replies/s, each round | median | CPU µs per request, each round | median |")
print("|---|---|---:|---|---:|")
med = {}
for tool in ("wrk", "before", "now"):
    r = rows.get(tool, [])
    med[tool] = (statistics.median(x for x, _ in r), statistics.median(c for _, c in r))
    print(f"| {tool} | {' / '.join(f'{x:.0f}' for x, _ in r)} | {med[tool][0]:.0f} | "
          f"{' / '.join(f'{c:.2f}' for _, c in r)} | {med[tool][1]:.2f} |")
print()
print(f"now / before: rate {med['now'][0] / med['before'][0]:.3f}, CPU per request {med['now'][1] / med['before'][1]:.3f}")
print(f"now / wrk: rate {med['now'][0] / med['wrk'][0]:.3f}, CPU per request {med['now'][1] / med['wrk'][1]:.3f}")
PY
