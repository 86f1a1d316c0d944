#!/usr/bin/env bash
# A short regression gate on the gateway pair's cost, as a ratio measured
# in one run (so a slow or busy machine slows both sides alike): the
# closed-loop rate through a gateway pair over QUIC (edge HTTP ingress ->
# origin -> mock upstream) over the rate straight at the same mock, each
# ROUNDS (3) times in turn, SECS (3) seconds each, the medians compared.
# Fails when the ratio falls below FLOOR twice in a row (see .ci/perf-floor
# for how it was chosen). Needs release builds of both binaries (it builds
# them; .ci/pair.sh).
#   .ci/perf-gate.sh            # about 40 s after the build
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}; SECS=${SECS:-3}
FLOOR=${FLOOR:-$(grep -v '^#' .ci/perf-floor | head -n 1)}
source .ci/pair.sh
# rate TARGET: replies per second of one closed-loop run (32 in flight).
rate() {
  rm -rf "$TMP/run"
  "$LG" run scenarios/quickstart.toml --quiet --target "$1" --concurrency 32 \
    --connections 32 --duration "${SECS}s" --out "$TMP/run" >/dev/null 2>&1 || true
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["throughput"])' "$TMP/run/summary.json"
}
# measure: ROUNDS of each in turn, then the verdict (exit 1 under FLOOR).
measure() {
  local direct=() pair=()
  for _ in $(seq "$ROUNDS"); do
    direct+=("$(rate "$mock/")"); pair+=("$(rate "$edge/")")
  done
  python3 - "$FLOOR" "${direct[*]}" "${pair[*]}" <<'PY'
import statistics, sys
floor = float(sys.argv[1])
direct = [float(x) for x in sys.argv[2].split()]
pair = [float(x) for x in sys.argv[3].split()]
ratio = statistics.median(pair) / statistics.median(direct)
print(f"direct to the mock: {' '.join(f'{x:.0f}' for x in direct)} replies/s")
print(f"through the pair:   {' '.join(f'{x:.0f}' for x in pair)} replies/s")
print(f"pair / direct = {ratio:.3f} (floor {floor})")
sys.exit(1 if ratio < floor else 0)
PY
}
if measure; then exit 0; fi
echo "under the floor: measuring again"
if measure; then exit 0; fi
echo "REGRESSION: twice, the gateway pair kept less of the direct rate than the floor allows"
exit 1
