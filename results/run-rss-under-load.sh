#!/usr/bin/env bash
# Memory and stalls of a gateway pair under steady load, over longer than
# one request timeout (30 s by default), for one or more builds in turn:
# each build gets a fresh pair (edge HTTP ingress -> origin over
# $TRANSPORT, quic by default) in front of one static nginx, then wrk closed
# loop at IN_FLIGHT (4) in STEP-second (3) pieces for DURATION (45). After
# each piece: both gateways' RSS and the slowest request of the piece
# (wrk's raw maximum, not its corrected percentiles). A structure that keeps
# something per request until a timeout shows as RSS that climbs for a
# whole timeout, and as stalls while it grows. Writes OUT/points.tsv and
# OUT/table.md. Needs Debian's nginx-light and wrk.
#   [TRANSPORT=quic|tls] [IN_FLIGHT=4] [DURATION=45] [STEP=3] [OUT=DIR]
#   results/run-rss-under-load.sh BINARY...
# Each build is named by its file name (name the copies by their revision).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: run-rss-under-load.sh BINARY..."; exit 2; }
BINS=(); for b in "$@"; do BINS+=("$(realpath "$b")"); done
C=${IN_FLIGHT:-4}; TOTAL=${DURATION:-45}; STEP=${STEP:-3}
OUT=${OUT:-results/$(date -u +%Y-%m-%d)-rss-under-load}
mkdir -p "$OUT"
source results/builds.sh
results/machine-info.sh "TRANSPORT=$TRANSPORT IN_FLIGHT=$C DURATION=$TOTAL STEP=$STEP results/run-rss-under-load.sh $(build_names "${BINS[@]}")" > "$OUT/machine.txt"
echo "CPUs this run may use: $(nproc) ($(taskset -pc $$ | sed 's/.*: //'))" >> "$OUT/machine.txt"
rss_mib() { awk '/VmRSS/ { printf "%.1f", $2 / 1024 }' "/proc/$1/status"; }
: > "$OUT/points.tsv"
for i in "${!BINS[@]}"; do
  name=b$i
  gateway_pair "$name" "${BINS[i]}"
  e=${name}_edge_pid; o=${name}_origin_pid; u=${name}_url
  t=0
  while [ "$t" -lt "$TOTAL" ]; do
    wrk -t1 -c"$C" -d"${STEP}s" -s "$TMP/post.lua" "${!u}" > "$TMP/wrk.txt"
    t=$((t + STEP))
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$(basename "${BINS[i]}")" "$t" \
      "$(awk '/requests in/ { print $1 }' "$TMP/wrk.txt")" \
      "$(awk '$1 == "Latency" && NF == 5 { print $4 }' "$TMP/wrk.txt")" \
      "$(rss_mib "${!e}")" "$(rss_mib "${!o}")" \
      "$(awk '/Non-2xx|Socket errors/' "$TMP/wrk.txt" | tr '\n' ' ' | sed 's/ *$//')" | tee -a "$OUT/points.tsv"
  done
  kill "${!e}" "${!o}" 2>/dev/null || true
done
python3 - "$OUT/points.tsv" "$STEP" > "$OUT/table.md" <<'PY'
import sys, collections
path, step = sys.argv[1], float(sys.argv[2])
rows = collections.defaultdict(list)
for line in open(path):
    b, t, n, mx, e, o, errs = (line.rstrip("\n").split("\t") + [""])[:7]
    rows[b].append((int(t), int(n) / step, mx, e, o, errs))
builds = list(rows)
print("| s | " + " | ".join(f"{b}: req/s | slowest | RSS MiB edge | origin" for b in builds) + " |")
print("|---:|" + "---:|---:|---:|---:|" * len(builds))
for k in range(max(len(r) for r in rows.values())):
    cols = []
    for b in builds:
        r = rows[b]
        if k < len(r):
            t, rate, mx, e, o, errs = r[k]
            cols += [f"{rate / 1000:.1f} k" + (f" ({errs})" if errs else ""), mx, e, o]
        else:
            cols += [""] * 4
    print(f"| {rows[builds[0]][k][0] if k < len(rows[builds[0]]) else ''} | " + " | ".join(cols) + " |")
PY
cat "$OUT/table.md"
