#!/usr/bin/env bash
# Allocations per request, before and after, alternately, twice: the
# existing script (results/2026-12-01-allocations/run.sh, the small
# eth_blockNumber request) and alloc.sh at each size in SIZES (a request
# and a reply of that many octets). BEFORE and AFTER are checkouts whose
# target/release/npamp-gateway is built (`cargo build --release -p
# npamp-gateway-cli`); nothing is built here (NO_BUILD=1).
#   alloc-ab.sh BEFORE AFTER [SIZES]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
before=$1 after=$2 sizes=${3:-"16384 65536"}
export NO_BUILD=1
for round in 1 2; do
  for which in before after; do
    dir=$before; [ "$which" = after ] && dir=$after
    echo "== run.sh, $which ($(git -C "$dir" rev-parse --short HEAD), load $(cut -d' ' -f1-3 /proc/loadavg))"
    "$here/../2026-12-01-allocations/run.sh" "$dir"
  done
done
for size in $sizes; do
  for round in 1 2; do
    for which in before after; do
      dir=$before; [ "$which" = after ] && dir=$after
      echo "== alloc.sh $size, $which (load $(cut -d' ' -f1-3 /proc/loadavg))"
      "$here/alloc.sh" "$dir" "$size"
    done
  done
done
