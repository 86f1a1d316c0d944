#!/usr/bin/env bash
# Runs the protocol-core criterion suites (record, wire, scanner) and writes
# raw output, machine facts and ratio tables under results/<date>-core/.
#   results/run-core-benches.sh            # ~6 minutes on 2 cores
set -euo pipefail
cd "$(dirname "$0")/.."
out="results/$(date -u +%Y-%m-%d)-core"
mkdir -p "$out"
opts=(--warm-up-time 1 --measurement-time 3)
results/machine-info.sh "cargo bench --bench {record,wire,scanner} -- ${opts[*]}" > "$out/machine.txt"
for b in record wire scanner; do
  cargo bench --bench "$b" -- "${opts[@]}" 2>&1 | tee "$out/$b.raw.txt" | grep -E '^[a-z_]+/|time:' || true
done
python3 results/summarize.py "$out/record.raw.txt" bare_aead_seal > "$out/record.md"
python3 results/summarize.py "$out/wire.raw.txt" decode > "$out/wire.md"
python3 results/summarize.py "$out/scanner.raw.txt" npamp_scan > "$out/scanner.md"
echo "wrote $out"
