#!/usr/bin/env bash
# Alternating runs of `cargo bench --bench assoc -- bridge_frames` from
# several bench binaries (each built with `cargo bench --bench assoc
# --no-run` in its own checkout and copied aside): ROUNDS rounds, each
# running every build once for every foreign-message size in SIZES and
# every sink in KEEPS (0: counting, as `Listener::bind`; 1: keeping each
# payload as an exchange does, NPAMP_BENCH_KEEP=1). A build is
# LABEL:BINARY[:VAR=VALUE] (an environment variable for it, e.g. a send
# mode). Prints criterion's lines for each run, headed by the load average
# (the machine is shared).
#   ab-bench.sh ROUNDS "SIZES" "KEEPS" BUILD...
# Environment passed on: NPAMP_BENCH_CPU=1 (samples in process CPU time);
# CRITERION_ARGS (e.g. "--warm-up-time 1 --measurement-time 3").
set -euo pipefail
rounds=$1 sizes=$2 keeps=$3; shift 3
cd "$(mktemp -d)"
for round in $(seq "$rounds"); do
  for size in $sizes; do
    for keep in $keeps; do
      for build in "$@"; do
        IFS=: read -r label bin var <<< "$build"
        echo "=== round $round size $size keep=$keep $label load: $(cut -d' ' -f1-3 /proc/loadavg)"
        keepvar=; [ "$keep" = 1 ] && keepvar=NPAMP_BENCH_KEEP=1
        env NPAMP_BENCH_FOREIGN="$size" $keepvar $var "$bin" --bench bridge_frames ${CRITERION_ARGS:-} 2>&1 |
          grep -E '^bridge_frames|time:|thrpt:' || true
      done
    done
  done
done
