#!/usr/bin/env bash
# The per-hop sweep with the gateway processes in the script's session
# (START_SESSION=shared, as every sweep before 2026-12-05 ran them) and in
# sessions of their own (own, as nginx's daemons run), alternated: shared,
# own, shared, own, each a whole run-per-hop-scaling.sh on CORES (1 and 2)
# at IN_FLIGHT (1 4 32), ROUNDS (2) rounds each. Each run's ratios against
# the nginx pair are within that run; the pairs of runs show how much the
# session alone moves them. Needs what run-per-hop.sh needs.
#   [CORES="1 2"] [IN_FLIGHT="1 4 32"] [ROUNDS=2] [SECONDS_PER_POINT=4] results/2026-12-05-sessions/run.sh [OUT]
set -euo pipefail
HERE=$(dirname "$(realpath "$0")"); OUT=$(realpath "${1:-$HERE}")
cd "$HERE/../.."
export CORES=${CORES:-1 2} IN_FLIGHT=${IN_FLIGHT:-1 4 32} ROUNDS=${ROUNDS:-2} SECONDS_PER_POINT=${SECONDS_PER_POINT:-4}
cargo build --release -q -p npamp-gateway-cli -p npamp-loadgen
results/machine-info.sh "CORES=\"$CORES\" IN_FLIGHT=\"$IN_FLIGHT\" ROUNDS=$ROUNDS SECONDS_PER_POINT=$SECONDS_PER_POINT results/2026-12-05-sessions/run.sh" > "$OUT/machine.txt"
echo "autogroup: kernel.sched_autogroup_enabled=$(cat /proc/sys/kernel/sched_autogroup_enabled)" >> "$OUT/machine.txt"
for run in 1 2; do
  for mode in shared own; do
    echo "== run $run, START_SESSION=$mode"
    START_SESSION=$mode OUT="$OUT/$mode-$run" results/run-per-hop-scaling.sh > /dev/null
  done
done
python3 - "$OUT" $CORES <<'PY' | tee "$OUT/summary.md"
import sys, re, collections
out, cores = sys.argv[1], sys.argv[2:]
# From each run's table: the gateway rows' ratios against the nginx pair
# (lowest-highest of its rounds) and the switches, preempted ones apart.
cols = ["rate", "edge CPU", "origin CPU", "switches edge", "origin", "preempted edge", "origin"]
print("Against the nginx pair, same run (lowest-highest of its rounds); switches and preempted per request\n")
print("| cores | in flight | path | run | " + " | ".join(cols) + " |")
print("|---:|---:|---|---|" + "---|" * len(cols))
rows = collections.defaultdict(list)
for n in cores:
    for mode in ("shared", "own"):
        for run in (1, 2):
            for line in open(f"{out}/{mode}-{run}/cores-{n}/table.md"):
                f = [x.strip() for x in line.strip().strip("|").split("|")]
                if len(f) < 15 or not f[1].startswith(("gateway", "nginx")):
                    continue
                rows[(int(n), int(f[0]), f[1])].append((f"{mode}-{run}", [f[10], f[11], f[12], f[8], f[9], f[13], f[14]]))
for (n, c, p), rs in sorted(rows.items()):
    for name, v in rs:
        print(f"| {n} | {c} | {p} | {name} | " + " | ".join(x or "" for x in v) + " |")
PY
