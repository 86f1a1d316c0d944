#!/usr/bin/env bash
# Runs fuzz targets for a given time each, JOBS at a time, and prints one
# line per target: executions, coverage, corpus size and outcome.
#
#   fuzz/run-all.sh 1800               # every target, 30 minutes each
#   fuzz/run-all.sh 1800 2             # the same, two targets at a time
#   fuzz/run-all.sh 600 1 tlv deframe  # only these targets
#
# Needs cargo-fuzz (`cargo install cargo-fuzz`). On a stable toolchain the
# sanitizer flags need RUSTC_BOOTSTRAP=1, which this script sets. Logs go to
# fuzz/logs/TARGET.log, the growing corpus to fuzz/corpus/TARGET (seeded
# from fuzz/seeds/TARGET, the committed corpus), crashes to fuzz/artifacts.
# Exits non-zero if any target found a crash.
set -euo pipefail
cd "$(dirname "$0")"
seconds="${1:-300}"
jobs="${2:-1}"
shift $(( $# > 2 ? 2 : $# ))
export RUSTC_BOOTSTRAP=1
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(cargo fuzz list)
fi
mkdir -p logs
cargo fuzz build

run_one() {
  local t="$1"
  mkdir -p "corpus/$t" "artifacts/$t"
  if [ -d "seeds/$t" ]; then cp -n seeds/"$t"/* "corpus/$t/" 2>/dev/null || true; fi
  local started
  started=$(date -u +%FT%TZ)
  local rc=0
  cargo fuzz run "$t" "corpus/$t" -- -max_total_time="$seconds" \
    -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 >"logs/$t.log" 2>&1 || rc=$?
  local execs cov
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "logs/$t.log" | grep -o '[0-9]*$' || echo "?")
  cov=$(grep -o 'cov: [0-9]*' "logs/$t.log" | tail -n 1 | grep -o '[0-9]*' || echo "?")
  local outcome="ok"
  [ "$rc" -eq 0 ] || outcome="CRASH (exit $rc, see logs/$t.log and artifacts/$t)"
  printf '%-18s started %s  %ss  execs %s  cov %s  corpus %s  %s\n' \
    "$t" "$started" "$seconds" "$execs" "$cov" "$(ls "corpus/$t" | wc -l)" "$outcome"
  [ "$rc" -eq 0 ]
}
export -f run_one
export seconds

status=0
printf '%s\n' "${targets[@]}" | xargs -P "$jobs" -I{} bash -c 'run_one "$@"' _ {} || status=$?
exit "$status"
