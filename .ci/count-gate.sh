#!/usr/bin/env bash
# A regression gate on what each request costs the gateway pair in events
# the kernel counts, not in time: UDP datagrams between the gateways and
# the times each gateway's threads went to sleep (voluntary context
# switches), per request, through a pair over QUIC
# (edge HTTP ingress -> origin -> mock upstream; .ci/pair.sh) at 4 and at 32
# requests in flight (closed loop, SECS (3) seconds after the scenario's 1 s
# warm-up). These are what decide a hop's cost at low concurrency (issue 20),
# and unlike a rate they hardly move with a busy machine: a change that
# sends a datagram more per request, or puts a thread to sleep more, shows
# at once. (Involuntary switches are left out: they count the other
# processes that preempt a gateway, which is the machine's load.)
# Each count is checked against its ceiling in .ci/count-ceilings (how they
# were chosen is written there); the gate fails when a count is over its
# ceiling in two measurements in a row.
#   .ci/count-gate.sh            # about 20 s after the build
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${SECS:-3}
CEILINGS=${CEILINGS:-.ci/count-ceilings}
source .ci/pair.sh
# UDP datagrams sent on this machine (both gateways: nothing else here
# speaks UDP during the gate).
udp_out() { awk '/^Udp:/ && $2 ~ /^[0-9]/ { print $5 }' /proc/net/snmp; }
# Voluntary context switches (a thread went to sleep) of every thread of
# process $1.
switches() { cat /proc/"$1"/task/*/status 2>/dev/null | awk '/^voluntary_ctxt_switches/ { n += $2 } END { print n + 0 }'; }
# point C: one closed-loop run at C in flight; prints
# "C replies datagrams/req edge-sleeps/req origin-sleeps/req".
point() {
  local c=$1 d0 e0 o0 d1 e1 o1 replied
  rm -rf "$TMP/run"
  d0=$(udp_out); e0=$(switches "$edge_pid"); o0=$(switches "$origin_pid")
  "$LG" run scenarios/quickstart.toml --quiet --target "$edge/" --concurrency "$c" \
    --connections "$c" --duration "${SECS}s" --out "$TMP/run" >/dev/null 2>&1 || true
  d1=$(udp_out); e1=$(switches "$edge_pid"); o1=$(switches "$origin_pid")
  replied=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["accounting"]["replied"])' "$TMP/run/summary.json")
  python3 - "$c" "$replied" "$((d1 - d0))" "$((e1 - e0))" "$((o1 - o0))" <<'PY'
import sys
c, n, d, e, o = sys.argv[1:]
n = max(int(n), 1)
print(c, n, *(f"{int(x) / n:.3f}" for x in (d, e, o)))
PY
}
# measure: both points, then the verdict against the ceilings (exit 1 over).
measure() {
  # A first short run opens the pair's association and the edge's
  # connections, so neither counts in the points.
  "$LG" run scenarios/quickstart.toml --quiet --target "$edge/" --concurrency 4 \
    --duration 1s >/dev/null 2>&1 || true
  { point 4; point 32; } > "$TMP/points"
  python3 - "$CEILINGS" "$TMP/points" <<'PY'
import sys
ceilings = {}
for line in open(sys.argv[1]):
    line = line.split("#", 1)[0].split()
    if line:
        ceilings[(line[0], line[1])] = float(line[2])
names = ["datagrams", "edge-sleeps", "origin-sleeps"]
over = []
print(f"{'in flight':>9} {'replies':>8}  per request: " + "  ".join(f"{n} (ceiling)" for n in names))
for row in open(sys.argv[2]):
    c, n, *counts = row.split()
    cells = []
    for name, value in zip(names, counts):
        ceiling = ceilings.get((c, name))
        cells.append(f"{value} ({ceiling})")
        if ceiling is not None and float(value) > ceiling:
            over.append(f"{name} at {c} in flight: {value} per request, ceiling {ceiling}")
    print(f"{c:>9} {n:>8}  " + "  ".join(cells))
for o in over:
    print("over:", o)
sys.exit(1 if over else 0)
PY
}
if measure; then exit 0; fi
echo "over a ceiling: measuring again"
if measure; then exit 0; fi
echo "REGRESSION: twice, a request cost the gateway pair more datagrams or sleeps than .ci/count-ceilings allows"
exit 1
