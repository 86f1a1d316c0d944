#!/usr/bin/env bash
# LSP through a gateway pair against the same server direct, in one run on
# 127.0.0.1 (issue 56): the lsp-editor scenario (one editor session:
# initialize, initialized, didOpen of a Python file, then hover, completion
# and definition across it) with the load generator's tcp+lsp:// target,
#   pylsp  a real language server (python-lsp-server from PyPI, as
#          .ci/lsp-tools.sh installs it) on TCP, at the scenario's 15/s:
#          direct, and through a pair over QUIC whose origin reaches that
#          same server (--protocol lsp --upstream tcp://);
#   mock   the mock upstream, which answers LSP in microseconds, at
#          MOCK_RATE/s: what is measured is the pair's own cost.
# Direct and pair alternate, ROUNDS times each. Prints each run's latency
# and rate; writes OUT (default results/DATE-lsp-load), each run's summary
# and report under it.
#   [ROUNDS=2] [MOCK_RATE=2000] [OUT=DIR] results/run-lsp-load.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source results/lib.sh
ROUNDS=${ROUNDS:-2}
MOCK_RATE=${MOCK_RATE:-2000}
OUT=${OUT:-results/$(date -u +%Y-%m-%d)-lsp-load}
PYLSP=${PYLSP:-target/lsp-tools/venv/bin/pylsp}
[ -x "$PYLSP" ] || { echo "no pylsp at $PYLSP: run .ci/lsp-tools.sh first"; exit 2; }
mkdir -p "$OUT"

# pylsp --tcp prints nothing when it is ready: wait for its port.
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
setsid "$PYLSP" --tcp --host 127.0.0.1 --port "$port" >"$TMP/pylsp.out" 2>"$TMP/pylsp.err" &
pids+=($!)
for _ in $(seq 100); do
  python3 -c "import socket, sys; socket.create_connection(('127.0.0.1', $port), 0.1)" 2>/dev/null && break
  sleep 0.1
done
start mock "^mock upstream" "$GW" mock-upstream --listen tcp://127.0.0.1:0

"$GW" keygen --out "$TMP/origin.key" >"$TMP/origin.pub"
"$GW" keygen --out "$TMP/edge.key" >"$TMP/edge.pub"
declare -A DIRECT PAIR
DIRECT[pylsp]="127.0.0.1:$port"
DIRECT[mock]=$(field mock 'mock upstream ' | sed 's|^tcp://||')
for up in pylsp mock; do
  start "origin-$up" "^listening on" "$GW" serve --protocol lsp --listen quic://127.0.0.1:0 \
    --upstream "tcp://${DIRECT[$up]}" --identity "$TMP/origin.key" --trust "$(cat "$TMP/edge.pub")"
  start "edge-$up" "^ingress" "$GW" serve --protocol lsp --ingress tcp://127.0.0.1:0 \
    --peer "$(field "origin-$up" 'listening on ')" \
    --identity "$TMP/edge.key" --trust "$(cat "$TMP/origin.pub")"
  PAIR[$up]=$(field "edge-$up" 'ingress ' | sed 's|^tcp://||')
done

row() {
  python3 - "$1" "$2" <<'PY'
import json, sys
s = json.load(open(sys.argv[2] + "/summary.json"))
l, r, a = s["latency_ms"], s["rates"], s["accounting"]
print(f"{sys.argv[1]:<18} offered {r['offered']:>6.0f}/s  achieved {r['achieved']:>8.1f}/s  "
      f"p50 {l['p50']:>8.3f} ms  p99 {l['p99']:>8.3f} ms  max {l['max']:>8.3f} ms  "
      f"errors {a['unexpected_errors'] + a['timed_out'] + a['lost']}")
PY
}

{
  echo "# $(date -u +%FT%TZ) $(uname -srm), $(nproc) CPUs; scenarios/lsp-editor.toml"
  for round in $(seq "$ROUNDS"); do
    for up in pylsp mock; do
      rate=(); [ $up = mock ] && rate=(--rate "$MOCK_RATE" --duration 10)
      for path in direct pair; do
        addr=${DIRECT[$up]}; [ $path = pair ] && addr=${PAIR[$up]}
        run="$OUT/$up-$path-$round"
        "$LG" run scenarios/lsp-editor.toml --quiet --target "tcp+lsp://$addr" "${rate[@]}" \
          --out "$run" >"$run.txt" 2>&1 || true
        row "$up-$path-$round" "$run"
      done
    done
  done
} | tee "$OUT/table.txt"
