#!/usr/bin/env bash
# Folds what long runs found (fuzz/corpus/TARGET) into the committed corpus
# (fuzz/seeds/TARGET): the smallest set of inputs, chosen greedily, that
# covers every code edge the two cover together (libFuzzer's set-cover
# merge on edges, without hit counters, keeps it small enough to commit).
#   fuzz/keep-corpus.sh            # every target
#   fuzz/keep-corpus.sh tlv lines  # these
set -euo pipefail
cd "$(dirname "$0")"
export RUSTC_BOOTSTRAP=1
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(cargo fuzz list)
fi
for t in "${targets[@]}"; do
  kept=$(mktemp -d)
  mkdir -p "corpus/$t" "seeds/$t"
  cargo fuzz run "$t" "$kept" "seeds/$t" "corpus/$t" -- -set_cover_merge=1 -use_counters=0 \
    >"$kept.log" 2>&1 || { tail -n 20 "$kept.log"; exit 1; }
  rm -rf "seeds/$t"
  mv "$kept" "seeds/$t"
  echo "$t: $(ls "seeds/$t" | wc -l) inputs, $(du -sb "seeds/$t" | cut -f1) octets ($(grep -o '[0-9]* new coverage edges' "$kept.log" | tail -n 1))"
  rm -f "$kept.log"
done
