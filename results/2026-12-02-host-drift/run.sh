#!/usr/bin/env bash
# Does this machine's own capacity hold still over a few minutes? Nothing of
# the project runs here: ROUNDS (24) times in a row, a wrk closed loop (8
# connections, 5 s) against a static-reply nginx on 127.0.0.1 (one worker;
# the same shape as a capacity step: a generator and a target sharing the
# cores), then one core's SHA-256 rate (openssl speed, 2 s). Prints each
# round and the max/min of each. Needs Debian's nginx-light and wrk.
# Run from the repository root:
#   bash results/2026-12-02-host-drift/run.sh [OUT]
set -euo pipefail
OUT=${1:-results/2026-12-02-host-drift}; ROUNDS=${ROUNDS:-24}
mkdir -p "$OUT"
NGX=$(mktemp -d); chmod 755 "$NGX"; WORKERS=1
source results/nginx.sh
trap 'kill "$(cat "$NGX/static.pid")" 2>/dev/null || true; rm -rf "$NGX"' EXIT
PORT=$(free_port)
nginx_static "$PORT"
bash results/machine-info.sh "bash results/2026-12-02-host-drift/run.sh" > "$OUT/machine.txt"
echo "nginx: $(nginx -v 2>&1); wrk: $(wrk -v 2>&1 | head -1); $(openssl version)" >> "$OUT/machine.txt"
sleep 0.5
printf "round\ttime\twrk_nginx_req_s\tsha256_16k_kB_s\n" > "$OUT/rounds.tsv"
for r in $(seq "$ROUNDS"); do
  rate=$(wrk -t1 -c8 -d5s "http://127.0.0.1:$PORT/" | awk '/^Requests\/sec/ { print $2 }')
  sha=$(openssl speed -seconds 2 -bytes 16384 sha256 2>/dev/null | awk '$1 == "sha256" { sub("k", "", $2); print $2 }')
  printf "%s\t%s\t%s\t%s\n" "$r" "$(date -u +%H:%M:%S)" "$rate" "$sha" | tee -a "$OUT/rounds.tsv"
done
python3 - "$OUT/rounds.tsv" <<'PY' | tee "$OUT/summary.txt"
import sys, statistics
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])][1:]
for i, name in ((2, "wrk -> nginx, req/s"), (3, "sha256 one core, kB/s")):
    v = [float(r[i]) for r in rows]
    print(f"{name}: min {min(v):.0f}, median {statistics.median(v):.0f}, max {max(v):.0f}, max/min {max(v) / min(v):.3f}")
PY
