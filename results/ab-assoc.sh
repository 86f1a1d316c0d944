#!/usr/bin/env bash
# A/B of the association bench: two bench binaries (built from two commits),
# alternating rounds of the `bridge_frames` group, so both see the same
# machine noise. Prints one line per (round, binary, function) and, per
# round and binary, the association's frame rate as a share of raw quinn's
# in the same run.
#
#   results/ab-assoc.sh OLD_BIN NEW_BIN [ROUNDS] [MEASUREMENT_SECONDS]
#
# Build a binary with `cargo bench --bench assoc --no-run` and copy the
# executable it names (target/release/deps/assoc-*) aside, per commit.
set -euo pipefail
old=$1
new=$2
rounds=${3:-3}
secs=${4:-5}
for round in $(seq "$rounds"); do
  for which in old new; do
    bin=$old
    [ "$which" = new ] && bin=$new
    "$bin" --bench bridge_frames --warm-up-time 1 --measurement-time "$secs" 2>&1 |
      awk -v w="$which" -v r="$round" '
        /^bridge_frames/ { name = $1 }
        /time:/ && name != "" { gsub(/\[/, ""); print w, r, name, $4, $5; name = "" }'
  done
done | awk '
  { print }
  # Normalise to microseconds (criterion prints ns, µs or ms).
  { v = $4; u = $5; if (u == "ns") v /= 1000; else if (u == "ms") v *= 1000 }
  $3 ~ /raw_quinn/ { raw[$1 " " $2] = v }
  $3 ~ /npamp_association/ { assoc[$1 " " $2] = v }
  END {
    for (k in raw) if (k in assoc)
      printf "ratio %s association/raw frame rate %.3f\n", k, raw[k] / assoc[k]
  }'
