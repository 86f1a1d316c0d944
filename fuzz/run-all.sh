#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each (default 300), one after another.
#   fuzz/run-all.sh 1800        # 30 minutes per target
# Needs cargo-fuzz (`cargo install cargo-fuzz`). On a stable toolchain the
# sanitizer flags need RUSTC_BOOTSTRAP=1, which this script sets.
set -euo pipefail
cd "$(dirname "$0")"
seconds="${1:-300}"
export RUSTC_BOOTSTRAP=1
targets=$(cargo fuzz list)
for t in $targets; do
  mkdir -p "corpus/$t"
  if [ -d "seeds/$t" ]; then cp -n seeds/"$t"/* "corpus/$t/" 2>/dev/null || true; fi
  echo "== $t for ${seconds}s"
  cargo fuzz run "$t" "corpus/$t" -- -max_total_time="$seconds" -rss_limit_mb=2048 2>&1 | tail -n 5
done
