#!/usr/bin/env bash
# Association benchmarks over loopback (QUIC and TLS) and `ping` RTT
# percentiles; writes results/<date>-assoc/.
#   results/run-assoc-benches.sh           # ~3 minutes on 2 cores
set -euo pipefail
cd "$(dirname "$0")/.."
out="results/$(date -u +%Y-%m-%d)-assoc"
mkdir -p "$out"
opts=(--warm-up-time 1 --measurement-time 5)
results/machine-info.sh "cargo bench --bench assoc -- ${opts[*]}; npamp-gateway ping --count 200 --interval-ms 2 (quic, tls)" > "$out/machine.txt"
cargo bench --bench assoc -- "${opts[@]}" 2>&1 | tee "$out/assoc.raw.txt" | grep -E '^[a-z_]+/|time:|thrpt:' || true
python3 results/summarize.py "$out/assoc.raw.txt" raw_quinn_same_bytes > "$out/assoc.md"

cargo build --release -q
b=target/release/npamp-gateway
tmp=$(mktemp -d)
spub=$($b keygen --out "$tmp/s.key")
cpub=$($b keygen --out "$tmp/c.key")
$b serve --listen quic://127.0.0.1:0 --listen tls://127.0.0.1:0 --identity "$tmp/s.key" --trust "$cpub" > "$tmp/serve.out" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 50); do [ "$(grep -c listening "$tmp/serve.out" || true)" -ge 2 ] && break; sleep 0.1; done
: > "$out/ping.txt"
for scheme in quic tls; do
  url=$(grep -o "$scheme://[0-9.:]*" "$tmp/serve.out" | head -1)
  echo "== $url" | tee -a "$out/ping.txt"
  $b ping "$url" --identity "$tmp/c.key" --trust "$spub" --count 200 --interval-ms 2 | tee -a "$out/ping.txt"
done
echo "wrote $out"
