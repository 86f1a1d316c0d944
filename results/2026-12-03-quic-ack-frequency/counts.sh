#!/usr/bin/env bash
# Per request, for each of several builds of npamp-gateway: UDP datagrams
# (both directions, /proc/net/snmp: only the pair sends UDP on this
# machine during the run), and the syscalls and context switches of the
# edge and of the origin (`perf stat` on each pid). Each build is a gateway
# pair over QUIC (edge HTTP ingress -> origin) in front of one static nginx
# (`return 200`); wrk closed loop at 1, 4 and 32 in flight, 4 s a point,
# the builds in turn within each point, ROUNDS (2) times. These are counts,
# not times, so a noisy shared machine moves them far less than a rate.
# Needs root (tracepoints), perf, Debian's nginx-light and wrk.
#   [ROUNDS=2] results/2026-12-03-quic-ack-frequency/counts.sh BINARY...
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${ROUNDS:-2}
BINS=(); for b in "$@"; do BINS+=("$(realpath "$b")"); done
[ ${#BINS[@]} -ge 1 ] || { echo "usage: counts.sh BINARY..."; exit 2; }
command -v perf >/dev/null || { echo "perf is not installed"; exit 1; }
TRANSPORT=quic  # the datagrams counted are QUIC's
source results/builds.sh
for i in "${!BINS[@]}"; do gateway_pair "p$i" "${BINS[i]}"; done
udp_out() { awk '/^Udp:/ && $2 ~ /^[0-9]/ { print $5 }' /proc/net/snmp; }
stat_count() { awk -F, -v ev="$2" '$3 == ev { print $1 + 0 }' "$1"; }
echo -e "round\tin flight\tbuild\trequests\tdatagrams/req\tedge syscalls/req\torigin syscalls/req\tedge switches/req\torigin switches/req"
for round in $(seq "$ROUNDS"); do
  for c in 1 4 32; do
    for i in "${!BINS[@]}"; do
      e=p${i}_edge_pid; o=p${i}_origin_pid; u=p${i}_url; url=${!u}
      wrk -t1 -c4 -d1s -s "$TMP/post.lua" "$url" > /dev/null
      perf stat -x, -e raw_syscalls:sys_enter,context-switches -p "${!e}" -o "$TMP/e.txt" -- sleep 4.5 & pe=$!
      perf stat -x, -e raw_syscalls:sys_enter,context-switches -p "${!o}" -o "$TMP/o.txt" -- sleep 4.5 & po=$!
      sleep 0.2
      d0=$(udp_out)
      n=$(wrk -t1 -c"$c" -d4s -s "$TMP/post.lua" "$url" | awk '/requests in/ { print $1 }')
      d1=$(udp_out)
      wait $pe $po
      python3 - "$round" "$c" "$(basename "${BINS[i]}")" "$n" "$((d1 - d0))" \
        "$(stat_count "$TMP/e.txt" raw_syscalls:sys_enter)" "$(stat_count "$TMP/o.txt" raw_syscalls:sys_enter)" \
        "$(stat_count "$TMP/e.txt" context-switches)" "$(stat_count "$TMP/o.txt" context-switches)" <<'PY'
import sys
r, c, b, n, d, es, os_, ec, oc = sys.argv[1:]
n = int(n)
print("\t".join([r, c, b, str(n)] + [f"{int(x) / n:.2f}" for x in (d, es, os_, ec, oc)]))
PY
    done
  done
done
