#!/usr/bin/env bash
# Two builds of the load generator side by side in one run (a change to the
# engine against the build before it): closed loop at its maximum rate
# against the mock upstream, over HTTP (one request in flight per
# connection) and over WebSocket (pipelined), 2 and 64 in flight; rounds
# alternate A, B, A, B, ... and the medians are compared. The mock is
# pinned to the last core, the generator to the others.
#   results/run-loadgen-ab.sh OLD_BIN NEW_BIN OUT_DIR [SECONDS] [ROUNDS]
# Build OLD_BIN from a worktree of the earlier commit
# (`git worktree add /tmp/old REV && cd /tmp/old &&
#  CARGO_TARGET_DIR=/tmp/old-target cargo build --release -p npamp-loadgen`).
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=$1 NEW=$2 OUT=$3 SECONDS_EACH=${4:-5} ROUNDS=${5:-5}
mkdir -p "$OUT"
TMP=$(mktemp -d)
LAST=$(( $(nproc) - 1 ))
TOOL_CPUS=0-$(( LAST > 0 ? LAST - 1 : 0 ))
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$TMP"' EXIT
mock() { # SCHEME -> prints the mock's URL
  taskset -c "$LAST" "$NEW" upstream --listen "$1://127.0.0.1:0" >"$TMP/mock-$1.out" 2>&1 &
  pids+=($!)
  for _ in $(seq 50); do grep -q "mock upstream" "$TMP/mock-$1.out" && break; sleep 0.1; done
  sed -n 's/^mock upstream //p' "$TMP/mock-$1.out"
}
HTTP=$(mock http)/
WS=$(mock ws)
results/machine-info.sh "results/run-loadgen-ab.sh $OLD $NEW $OUT $SECONDS_EACH $ROUNDS" >"$OUT/machine.txt"
rate() { python3 -c "import json,sys; print(round(json.load(open(sys.argv[1]))['throughput']))" "$1"; }
{
  echo "| target | in flight | A (old) replies/s, $ROUNDS rounds | B (new) replies/s | median B / median A |"
  echo "|---|---:|---|---|---:|"
  for target in "$HTTP" "$WS"; do
    for n in 2 64; do
      conns=$n
      [[ $target == ws* ]] && conns=2
      as=(); bs=()
      for round in $(seq "$ROUNDS"); do
        for side in A B; do
          bin=$OLD; [[ $side == B ]] && bin=$NEW
          dir="$OUT/${side}-$(echo "$target" | cut -d: -f1)-$n-$round"
          taskset -c "$TOOL_CPUS" "$bin" run scenarios/closed-64.toml --target "$target" \
            --concurrency "$n" --connections "$conns" --duration "$SECONDS_EACH" --quiet --out "$dir" >"$dir.txt"
          if [[ $side == A ]]; then as+=("$(rate "$dir/summary.json")"); else bs+=("$(rate "$dir/summary.json")"); fi
        done
      done
      python3 - "$target" "$n" "${as[*]}" "${bs[*]}" <<'PY'
import statistics, sys
t, n, a, b = sys.argv[1], sys.argv[2], [float(x) for x in sys.argv[3].split()], [float(x) for x in sys.argv[4].split()]
print(f"| {t.split(':')[0]} | {n} | {' / '.join(f'{x:.0f}' for x in a)} | {' / '.join(f'{x:.0f}' for x in b)} | {statistics.median(b) / statistics.median(a):.3f} |")
PY
    done
  done
} | tee "$OUT/ab.md"
