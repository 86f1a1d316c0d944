#!/usr/bin/env bash
# How each path's rate grows with cores (issue 20: "from 1 to 16 cores, goal
# >= 10x"). Runs results/run-per-hop.sh whole under `taskset` on the first N
# CPUs, for each N in CORES. Everything on the path shares those N CPUs and
# sizes itself by them: wrk (WRK_THREADS=N), nginx's workers (nproc), and
# each gateway's tokio workers and association pool (available_parallelism).
# So a point answers: what this whole path serves on an N-core machine.
# Then OUT/scaling.md: the median rate of each path on N cores, and that
# rate over the same path's rate on the first N of CORES.
# Each N gets its own folder, OUT/cores-N, with run-per-hop.sh's table.
# On a machine without cargo, nginx or wrk: results/portable/ (pack here,
# run there).
#   [CORES="1 2 4 8 16"] [IN_FLIGHT=256] [ROUNDS=2] [SECONDS_PER_POINT=5]
#   [OUT=DIR] results/run-per-hop-scaling.sh
set -euo pipefail
cd "$(dirname "$0")/.."
command -v taskset >/dev/null || { echo "taskset is not installed (util-linux)"; exit 1; }
all=$(nproc)
if [ -z "${CORES:-}" ]; then
  CORES=""; n=1
  while [ "$n" -le "$all" ]; do CORES+="${CORES:+ }$n"; n=$((n * 2)); done
fi
for n in $CORES; do
  [ "$n" -ge 1 ] && [ "$n" -le "$all" ] || { echo "CORES: $n is not between 1 and nproc ($all)"; exit 1; }
done
export IN_FLIGHT=${IN_FLIGHT:-256} ROUNDS=${ROUNDS:-2} SECONDS_PER_POINT=${SECONDS_PER_POINT:-5}
OUT=${OUT:-results/$(date -u +%Y-%m-%d)-per-hop-scaling}
mkdir -p "$OUT"
results/machine-info.sh "CORES=\"$CORES\" IN_FLIGHT=\"$IN_FLIGHT\" ROUNDS=$ROUNDS SECONDS_PER_POINT=$SECONDS_PER_POINT results/run-per-hop-scaling.sh" > "$OUT/machine.txt"
for n in $CORES; do
  echo "== $n core(s): CPUs 0-$((n - 1))"
  OUT="$OUT/cores-$n" WRK_THREADS=$n taskset -c "0-$((n - 1))" results/run-per-hop.sh
done
python3 - "$OUT" $CORES > "$OUT/scaling.md" <<'PY'
import os, sys, statistics, collections
out, cores = sys.argv[1], [int(c) for c in sys.argv[2:]]
secs = float(os.environ["SECONDS_PER_POINT"])
rate = collections.defaultdict(list)  # (cores, in flight, path) -> req/s of each round
for n in cores:
    for line in open(f"{out}/cores-{n}/points.tsv"):
        f = line.rstrip("\n").split("\t")
        kv = dict(x.split("=", 1) for x in f[3:])
        rate[(n, int(f[1]), f[2])].append(int(kv["reqs"]))
paths = list(dict.fromkeys(p for _, _, p in rate))
print(f"Median rate of the rounds, k req/s (x: over {cores[0]} core(s), same path, same in flight)\n")
print("| in flight | path | " + " | ".join(f"{n} core(s)" for n in cores) + " |")
print("|---:|---|" + "---:|" * len(cores))
for c in sorted({c for _, c, _ in rate}):
    for p in paths:
        base = rate.get((cores[0], c, p))
        cols = []
        for n in cores:
            r = rate.get((n, c, p))
            if not r:
                cols.append("—")
                continue
            k = statistics.median(r) / secs / 1000
            x = f" ({statistics.median(r) / statistics.median(base):.2f}x)" if base and n != cores[0] else ""
            cols.append(f"{k:.1f}{x}")
        print(f"| {c} | {p} | " + " | ".join(cols) + " |")
PY
cat "$OUT/scaling.md"
