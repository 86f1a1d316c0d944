#!/usr/bin/env bash
# CPU time per batch of 64 Bridge frames (256 B foreign message) through one
# QUIC association, against raw quinn moving the same octets, from one bench
# binary: each function runs alone (warm-up 0.2 s, measurement 5 s) and the
# process's user + system CPU time is divided by the iterations criterion
# planned. Setup and warm-up are included, so both figures are high by a few
# percent, alike. Alternates raw and association ROUNDS times.
#
#   results/assoc-cpu-budget.sh BENCH_BIN [ROUNDS]
#
# Build the binary with `cargo bench --bench assoc --no-run` (it prints the
# path of the executable).
set -euo pipefail
bin=$1
rounds=${2:-3}
run() {
  local out
  out=$( { TIMEFORMAT='cpu %U %S'; time "$bin" --bench "$1" --warm-up-time 0.2 --measurement-time 5; } 2>&1)
  echo "$out" | awk -v f="$1" -v r="$2" '
    /iterations\)/ { n = $0; sub(/.*\(/, "", n); sub(/ iterations.*/, "", n)
                     m = 1; if (n ~ /k$/) m = 1e3; if (n ~ /M$/) m = 1e6
                     sub(/[kM]$/, "", n); iters = n * m }
    /time:/ && !seen { gsub(/\[/, ""); wall = $4 " " $5; seen = 1 }
    /^cpu / { cpu = $2 + $3 }
    END { printf "round %s %-22s iterations %d  wall/batch %s  cpu/batch %.1f us\n", r, f, iters, wall, cpu * 1e6 / iters }'
}
for round in $(seq "$rounds"); do
  run raw_quinn_same_bytes "$round"
  run npamp_association "$round"
done
