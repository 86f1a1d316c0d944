#!/usr/bin/env bash
# A short fuzz run for CI: builds every target with libFuzzer's coverage
# instrumentation (plain cargo, stable toolchain; no sanitizer, so neither
# cargo-fuzz nor nightly is needed) and runs each one for SECONDS (default 5)
# from a copy of its committed corpus (fuzz/seeds/TARGET). Fails on the first
# crash, leaving the input under fuzz/target/smoke-artifacts/TARGET.
#   fuzz/smoke.sh        # about 55 s of fuzzing for the eleven targets
set -euo pipefail
cd "$(dirname "$0")"
seconds="${1:-5}"
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks"
# With an explicit --target the flags reach only the fuzzed code, not the
# build scripts and proc macros (which would not link against libFuzzer).
host=$(rustc -vV | sed -n 's/^host: //p')
target_dir=target/smoke
cargo build --release --quiet --target-dir "$target_dir" --target "$host" --bins
bin="$target_dir/$host/release"
mapfile -t targets < <(sed -n 's/^name = "\(.*\)"$/\1/p' Cargo.toml | grep -v '^npamp-gateway-fuzz$')
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for t in "${targets[@]}"; do
  mkdir -p "$work/$t" "target/smoke-artifacts/$t"
  if [ -d "seeds/$t" ]; then cp seeds/"$t"/* "$work/$t/"; fi
  if ! "$bin/$t" "$work/$t" -max_total_time="$seconds" -rss_limit_mb=2048 \
      -timeout=10 -artifact_prefix="target/smoke-artifacts/$t/" >"$work/$t.log" 2>&1; then
    tail -n 40 "$work/$t.log"
    echo "fuzz smoke: $t crashed; the input is in fuzz/target/smoke-artifacts/$t/" >&2
    exit 1
  fi
  printf '%-16s %s\n' "$t" "$(grep -o 'Done [0-9]* runs' "$work/$t.log" || echo '?')"
done
echo "fuzz smoke: ${#targets[@]} targets, ${seconds}s each, no crash"
