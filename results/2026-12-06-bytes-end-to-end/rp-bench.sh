#!/usr/bin/env bash
# Alternating runs of `cargo bench --bench assoc -- receive_path` (the
# receiving side alone, one thread, no transport) from several bench
# binaries, ROUNDS rounds, with the system allocator (glibc, as `cargo
# bench` runs it) and with mimalloc v3 preloaded (MIMALLOC_SO: a build of
# the same mimalloc source the gateway's release binary links, with
# MI_MALLOC_OVERRIDE), the gateway's allocator.
#   rp-bench.sh ROUNDS LABEL:BINARY...
set -euo pipefail
rounds=$1; shift
cd "$(mktemp -d)"
for round in $(seq "$rounds"); do
  for alloc in glibc mimalloc; do
    for build in "$@"; do
      IFS=: read -r label bin <<< "$build"
      echo "=== round $round $alloc $label load: $(cut -d' ' -f1-3 /proc/loadavg)"
      pre=; [ "$alloc" = mimalloc ] && pre="LD_PRELOAD=$MIMALLOC_SO"
      env $pre "$bin" --bench receive_path --warm-up-time 1 --measurement-time 2 2>&1 |
        grep -E '^receive_path|time:' | grep -v '%' || true
    done
  done
done
