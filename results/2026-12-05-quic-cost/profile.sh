#!/usr/bin/env bash
# Where a QUIC hop's CPU goes beside a TLS hop's, in one run on 127.0.0.1:
# for each transport, a fresh gateway pair (edge HTTP ingress -> origin, the
# build's default shards) in front of one static nginx upstream (`return
# 200`), wrk closed loop at IN_FLIGHT (4) in flight, and three 3 s windows:
#   1. no tracer: rate and CPU per request of each gateway (utime + stime
#      deltas of /proc/PID/stat), UDP datagrams per request (/proc/net/snmp);
#   2. `perf trace -s` on each gateway: system calls per request, by call;
#   3. `perf record -g` (frame pointers, 4999 Hz) on each gateway: samples
#      per request by where they fall (kernel scheduling, the rest of the
#      kernel, quinn, rustls and aws-lc, tokio and mio, hyper, this crate,
#      mimalloc, the rest), as µs per request at the sampling rate. The
#      tracer slows the pair, so these µs are larger than window 1's; read
#      them as shares. Needs Debian's nginx-light, wrk and linux-perf.
#   [IN_FLIGHT=4] [OUT=DIR] results/2026-12-05-quic-cost/profile.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
C=${IN_FLIGHT:-4}; OUT=${OUT:-results/2026-12-05-quic-cost/run}
command -v perf >/dev/null || { echo "perf is not installed (apt-get install linux-perf)"; exit 1; }
mkdir -p "$OUT"
cargo build --release -q -p npamp-gateway-cli
GW=target/release/npamp-gateway
source results/builds.sh
HZ=$(getconf CLK_TCK)
# load SECONDS: wrk at $C in flight on $url for SECONDS; the requests it made.
load() { wrk -t1 -c"$C" -d"$1"s -s "$TMP/post.lua" "$url" | awk '/requests in/ { print $1 }'; }
results/machine-info.sh "IN_FLIGHT=$C results/2026-12-05-quic-cost/profile.sh" > "$OUT/machine.txt"
for transport in quic tls; do
  TRANSPORT=$transport gateway_pair "$transport" "$GW"
  u=${transport}_url; url=${!u}
  e=${transport}_edge_pid; o=${transport}_origin_pid; edge=${!e}; origin=${!o}
  load 1 > /dev/null
  e0=$(ticks "$edge"); o0=$(ticks "$origin"); d0=$(udp_in)
  n=$(load 3)
  e1=$(ticks "$edge"); o1=$(ticks "$origin"); d1=$(udp_in)
  awk -v t="$transport" -v n="$n" -v e=$((e1 - e0)) -v o=$((o1 - o0)) -v d=$((d1 - d0)) -v hz="$HZ" \
    'BEGIN { printf "%s: %.0f req/s, CPU us/req edge %.1f origin %.1f, UDP datagrams/req %.2f\n", t, n / 3, e * 1e6 / hz / n, o * 1e6 / hz / n, d / n }' \
    | tee -a "$OUT/summary.txt"
  tracers=()
  for hop in edge origin; do
    p=$edge; [ $hop = origin ] && p=$origin
    perf trace -s -p "$p" -o "$OUT/trace-$transport-$hop.txt" -- sleep 3.3 & tracers+=($!)
  done
  sleep 0.2; n=$(load 3); wait "${tracers[@]}"
  echo "$n" > "$OUT/trace-$transport.requests"
  tracers=()
  for hop in edge origin; do
    p=$edge; [ $hop = origin ] && p=$origin
    perf record -F 4999 -g -o "$TMP/perf-$transport-$hop.data" -p "$p" -- sleep 3.3 > /dev/null 2>&1 & tracers+=($!)
  done
  sleep 0.2; n=$(load 3); wait "${tracers[@]}"
  for hop in edge origin; do
    awk -v t="$transport" -v h="$hop" -v n="$(cat "$OUT/trace-$transport.requests")" \
      '$2 ~ /^[0-9]+$/ && NF >= 8 { calls[$1] += $2; errs[$1] += $3 }
       END { printf "%s %s syscalls/req:", t, h; for (c in calls) { tot += calls[c]; printf " %s %.2f", c, calls[c] / n; if (errs[c]) printf " (%.2f failed)", errs[c] / n }; printf "; all %.2f\n", tot / n }' \
      "$OUT/trace-$transport-$hop.txt" | tee -a "$OUT/summary.txt"
    perf report -i "$TMP/perf-$transport-$hop.data" --no-children --sort sym -g none -n 2>/dev/null | grep '%' | grep -v '^#' \
      | awk -v t="$transport" -v h="$hop" -v n="$n" '{ c = $2; s = $0
          if (s ~ /\[k\]/) { if (s ~ /finish_task_switch|irqrestore|_raw_spin_unlock_irq|irqentry_exit/) ks += c; else k += c }
          else if (s ~ /quinn/) q += c; else if (s ~ /rustls|aws_lc/) cr += c; else if (s ~ /tokio|mio::/) tk += c
          else if (s ~ /hyper/) hy += c; else if (s ~ /npamp_gateway/) np += c; else if (s ~ /mi_|_mi_/) m += c; else o += c; tot += c }
          END { f = 1e6 / 4999 / n; printf "%s %s samples as us/req: all %.1f | kernel after a switch or wake-up %.1f, rest of kernel %.1f | quinn %.1f, rustls+aws-lc %.1f, tokio+mio %.1f, hyper %.1f, npamp %.1f, mimalloc %.1f, rest %.1f\n",
                t, h, tot * f, ks * f, k * f, q * f, cr * f, tk * f, hy * f, np * f, m * f, o * f }' | tee -a "$OUT/summary.txt"
  done
  kill "$edge" "$origin"
done
