#!/usr/bin/env bash
# A run across four workers started as a Kubernetes Job starts its pods,
# seconds apart (issue 54, item 2): four `run --shard I/4` processes against
# one mock upstream, each started STAGGER seconds after the one before,
# then `merge`. Prints and writes (OUT, default
# results/DATE-staggered-merge) each worker's and the merged table, and
# checks that the merged accounting is the workers' sum and that the
# merged rates are within 1 % of the offered.
#   [RATE=2000] [DURATION=10s] [STAGGER=0.7] [OUT=DIR] results/run-staggered-merge.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source results/lib.sh
RATE=${RATE:-2000}
DURATION=${DURATION:-10s}
STAGGER=${STAGGER:-0.7}
OUT=${OUT:-results/$(date -u +%Y-%m-%d)-staggered-merge}
mkdir -p "$OUT"
start mock "^mock upstream" "$GW" mock-upstream --listen http://127.0.0.1:0
target=$(field mock 'mock upstream ')
workers=()
for i in 0 1 2 3; do
  "$LG" run scenarios/quickstart.toml --quiet --target "$target" --rate "$RATE" \
    --duration "$DURATION" --shard "$i/4" --out "$OUT/worker-$i" >"$OUT/worker-$i.txt" 2>&1 &
  workers+=($!)
  sleep "$STAGGER"
done
for w in "${workers[@]}"; do wait "$w"; done
"$LG" merge "$OUT"/worker-{0,1,2,3} --out "$OUT/merged" >"$OUT/merged.txt" 2>&1 || true
cat "$OUT/merged.txt"
python3 - "$OUT" >"$OUT/check.txt" <<'PY'
import json, sys
out = sys.argv[1]
parts = [json.load(open(f"{out}/worker-{i}/summary.json")) for i in range(4)]
m = json.load(open(f"{out}/merged/summary.json"))
starts = [p["started_at_ms"] for p in parts]
print("worker starts, s after the first:", [round((s - starts[0]) / 1e3, 2) for s in starts])
for key in ["sent_requests", "sent_measured", "replied", "ok", "lost", "duplicated", "mismatched", "dropped"]:
    total = sum(p["accounting"].get(key, 0) for p in parts)
    assert m["accounting"].get(key, 0) == total, (key, m["accounting"].get(key, 0), total)
print("accounting: the merge is the workers' sum, key by key")
r = m["rates"]
for name in ["sent", "achieved"]:
    share = r[name] / r["offered"]
    print(f"{name} {r[name]:.1f}/s of {r['offered']:.0f}/s offered: {share * 100:.2f} %")
    assert abs(share - 1) <= 0.01, (name, share)
print("stage rows (offered, achieved):", [(s["offered"], round(s["achieved"], 1)) for s in m["stages"]])
PY
cat "$OUT/check.txt"
