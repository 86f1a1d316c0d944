#!/usr/bin/env bash
# The first requests through a freshly started gateway pair, for one or more
# builds: for each build and transport, TRIALS (5) times a new pair (edge
# HTTP ingress -> origin over quic and tls) in front of one static nginx,
# WAIT (1) seconds after both say they are ready, then three requests one
# after the other (curl), their times in ms. A handshake or a one-time
# initialisation left for the first request shows in the first column.
# Writes OUT/points.tsv and OUT/table.md. Needs nginx-light, wrk and curl.
#   [TRIALS=5] [WAIT=1] [OUT=DIR] results/run-first-request.sh BINARY...
# Each build is named by its file name (name the copies by their revision).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: run-first-request.sh BINARY..."; exit 2; }
command -v curl >/dev/null || { echo "curl is not installed"; exit 1; }
BINS=(); for b in "$@"; do BINS+=("$(realpath "$b")"); done
TRIALS=${TRIALS:-5}; WAIT=${WAIT:-1}
OUT=${OUT:-results/$(date -u +%Y-%m-%d)-first-request}
mkdir -p "$OUT"
source results/builds.sh
results/machine-info.sh "TRIALS=$TRIALS WAIT=$WAIT results/run-first-request.sh $(build_names "${BINS[@]}")" > "$OUT/machine.txt"
body='{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}'
: > "$OUT/points.tsv"
n=0
for TRANSPORT in quic tls; do
  for trial in $(seq "$TRIALS"); do
    for i in "${!BINS[@]}"; do
      n=$((n + 1)); name=p$n
      gateway_pair "$name" "${BINS[i]}"
      sleep "$WAIT"
      u=${name}_url; times=()
      for _ in 1 2 3; do
        times+=("$(curl -s -o /dev/null -w '%{time_total}' -H 'content-type: application/json' -d "$body" "${!u}")")
      done
      printf '%s\t%s\t%s\t%s\n' "$TRANSPORT" "$trial" "$(basename "${BINS[i]}")" "${times[*]}" | tee -a "$OUT/points.tsv"
      e=${name}_edge_pid; o=${name}_origin_pid
      kill "${!e}" "${!o}" 2>/dev/null || true
    done
  done
done
python3 - "$OUT/points.tsv" > "$OUT/table.md" <<'PY'
import sys, collections
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    t, trial, build, times = line.rstrip("\n").split("\t")
    rows[(t, build)].append([float(x) * 1000 for x in times.split()])
print("| transport | build | 1st request, ms (each trial) | 2nd | 3rd |")
print("|---|---|---|---|---|")
for (t, b), r in rows.items():
    cols = [" ".join(f"{x[k]:.1f}" for x in r) for k in range(3)]
    print(f"| {t} | {b} | " + " | ".join(cols) + " |")
PY
cat "$OUT/table.md"
