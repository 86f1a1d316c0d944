#!/usr/bin/env bash
# One build with --shards 0 (A: every task on tokio's shared pool of worker
# threads, as before shards) and with its default (B: one shard per CPU the
# process may use), side by side in one run: results/run-build-ab.sh over
# TCP + TLS and over QUIC, each at IN_FLIGHT ("1 4 32"), ROUNDS (6) rounds of
# SECONDS_PER_POINT (2) s. Needs Debian's nginx-light and wrk.
#   results/2026-12-05-shards/run.sh BINARY [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=$(realpath "$1"); OUT=${2:-results/2026-12-05-shards}
export ROUNDS=${ROUNDS:-6} SECONDS_PER_POINT=${SECONDS_PER_POINT:-2} IN_FLIGHT=${IN_FLIGHT:-1 4 32}
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
# The build's name in the tables is the wrapper's: `serve` gets the flag,
# other commands (keygen) run as they are.
cat > "$W/shards-0" <<EOF
#!/bin/sh
[ "\$1" = serve ] && exec "$BIN" "\$@" --shards 0
exec "$BIN" "\$@"
EOF
printf '#!/bin/sh\nexec "%s" "$@"\n' "$BIN" > "$W/shards-per-cpu"
chmod +x "$W/shards-0" "$W/shards-per-cpu"
mkdir -p "$OUT"
results/machine-info.sh "ROUNDS=$ROUNDS SECONDS_PER_POINT=$SECONDS_PER_POINT IN_FLIGHT=\"$IN_FLIGHT\" results/2026-12-05-shards/run.sh target/release/npamp-gateway" > "$OUT/machine.txt"
for transport in tls quic; do
  TRANSPORT=$transport results/run-build-ab.sh "$W/shards-0" "$W/shards-per-cpu" "$OUT/$transport"
done
