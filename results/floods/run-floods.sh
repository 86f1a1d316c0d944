#!/usr/bin/env bash
# Handshake floods against one `serve` with a tls:// and a quic:// listener,
# each run 20 s with a real association probed every second over the same
# transport (`npamp-loadgen flood`): 10 000 silent TCP connections (one the
# server closes is opened again at once), and QUIC attempts that never
# complete at as high a rate as this machine makes; each from another
# loopback address (127.0.0.2: another host as far as the server can tell)
# and from the probe's own address (127.0.0.1). Passes when every probe
# completes within 2 s; also counts the server's log lines per second.
#   results/floods/run-floods.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-results/floods/$(date -u +%Y-%m-%d)}
DURATION=${DURATION:-20}
mkdir -p "$OUT"
source results/lib.sh
results/machine-info.sh "results/floods/run-floods.sh $OUT (DURATION=$DURATION)" > "$OUT/machine.txt"
SERVER_PUB=$($GW keygen --out "$TMP/server.key")
PROBE_PUB=$($GW keygen --out "$TMP/probe.key")
port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
TLS_PORT=$(port); QUIC_PORT=$(port)
start server "listening on quic" "$GW" serve \
  --listen "tls://127.0.0.1:$TLS_PORT" --listen "quic://127.0.0.1:$QUIC_PORT" \
  --identity "$TMP/server.key" --trust "$PROBE_PUB"
status=0
for run in "tls silent 127.0.0.2" "tls silent 127.0.0.1" "quic quic 127.0.0.2" "quic quic 127.0.0.1"; do
  read -r scheme kind source <<<"$run"
  name="$scheme-$kind-from-$source"
  port=$TLS_PORT; load=(--silent 10000)
  if [ "$scheme" = quic ]; then port=$QUIC_PORT; load=(--quic-rate 1000000); fi
  before=$(wc -l < "$TMP/server.err")
  rc=0
  "$LG" flood --target "$scheme://127.0.0.1:$port" "${load[@]}" --source "$source" \
    --duration "$DURATION" --probe-every 1 --identity "$TMP/probe.key" --trust "$SERVER_PUB" \
    > "$OUT/$name.json" || rc=$?
  after=$(wc -l < "$TMP/server.err")
  python3 - "$OUT/$name.json" "$name" "$rc" "$((after - before))" "$DURATION" >> "$OUT/summary.txt" <<'PY'
import json, sys
path, name, rc, lines, duration = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
d = json.load(open(path))
ok = [p["took_ms"] for p in d["probe_list"] if p["ok"]]
failed = [p["error"] for p in d["probe_list"] if not p["ok"]]
print(f"{name}: exit {rc}; probes {d['probes_ok']}/{d['probes']} ok, slowest {max(ok, default=0):.0f} ms, "
      f"median {sorted(ok)[len(ok)//2] if ok else 0:.0f} ms; silent opened {d['silent_opened']} "
      f"(closed by the server {d['silent_closed_by_server']}); QUIC attempts {d['quic_attempts']} "
      f"({d['quic_attempts']/duration:.0f}/s); server log lines {lines} ({lines/duration:.2f}/s)"
      + (f"; failed: {failed}" if failed else ""))
PY
  [ "$rc" = 0 ] || status=1
  sleep 4  # the first-octets deadline passes; the next run starts clean
done
cp "$TMP/server.err" "$OUT/server.log"
cat "$OUT/summary.txt"
exit $status
