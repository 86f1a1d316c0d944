#!/usr/bin/env bash
# `capacity` where it used to go wrong (issue 54, item 3), on 127.0.0.1:
#   first-step-fails  the mock answering after 20 ms behind 4 connections
#                     (at most 200 requests/s, Little's law), searched from
#                     --start 800: down by halving to a rate that passes,
#                     then bisected to --precision 5 %;
#   dead              a port nothing listens on: the first step gets no
#                     answer, and the search ends there (exit 6).
# Writes OUT (default results/DATE-capacity-edges): each search's table,
# exit code, capacity.json and report.
#   [OUT=DIR] results/run-capacity-edges.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source results/lib.sh
OUT=${OUT:-results/$(date -u +%Y-%m-%d)-capacity-edges}
mkdir -p "$OUT"
start mock "^mock upstream" "$GW" mock-upstream --listen http://127.0.0.1:0 --latency fixed:20
cat >"$TMP/work.toml" <<'TOML'
name = "work"
timeout = 5
[load]
model = "open"
rate = 1
[mix]
[[mix.message]]
method = "work"
params = '[{seq}]'
TOML
dead=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
search() {
  local name=$1 target=$2; shift 2
  mkdir -p "$OUT/$name"
  local rc=0
  "$LG" capacity "$TMP/work.toml" --target "$target" --slo "p99<150ms,errors<1%" \
    --connections 4 --step 2s --warmup 500ms --out "$OUT/$name" "$@" \
    >"$OUT/$name/table.txt" 2>"$OUT/$name/steps.txt" || rc=$?
  echo "exit $rc" >>"$OUT/$name/table.txt"
  echo "== $name (exit $rc)"; cat "$OUT/$name/table.txt"
}
{
  echo "# $(date -u +%FT%TZ) $(uname -srm), $(nproc) CPUs"
  search first-step-fails "$(field mock 'mock upstream ')" --start 800
  search dead "http://127.0.0.1:$dead/" --start 500
} | tee "$OUT/summary.txt"
