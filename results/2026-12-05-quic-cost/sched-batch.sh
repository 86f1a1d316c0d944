#!/usr/bin/env bash
# Both gateways' threads under SCHED_BATCH (a woken thread does not preempt
# the running one) against SCHED_OTHER, same pair, in turn, three rounds:
# for each transport a fresh pair (edge HTTP ingress -> origin, default
# shards) in front of one static nginx upstream, wrk at C (4) in flight for
# 3 s; rate, CPU per request of each gateway (utime + stime deltas of
# /proc/PID/stat), and their involuntary switches per request together.
# Needs Debian's nginx-light and wrk, and chrt (util-linux).
#   [C=4] [TS="quic tls"] results/2026-12-05-quic-cost/sched-batch.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release -q -p npamp-gateway-cli
GW=target/release/npamp-gateway
source results/builds.sh
for t in ${TS:-quic tls}; do
  TRANSPORT=$t gateway_pair "$t" "$GW"
  u=${t}_url; url=${!u}; e=${t}_edge_pid; o=${t}_origin_pid; e=${!e}; o=${!o}
  for _ in 1 2 3; do
    for pol in normal batch; do
      if [ $pol = batch ]; then flag=-b; else flag=-o; fi
      chrt -a $flag -p 0 "$e" > /dev/null; chrt -a $flag -p 0 "$o" > /dev/null
      wrk -t1 -c4 -d1s -s "$TMP/post.lua" "$url" > /dev/null
      e0=$(ticks "$e"); o0=$(ticks "$o"); p0=$(preempted "$e" "$o")
      n=$(wrk -t1 -c"${C:-4}" -d3s -s "$TMP/post.lua" "$url" | awk '/requests in/ { print $1 }')
      e1=$(ticks "$e"); o1=$(ticks "$o"); p1=$(preempted "$e" "$o")
      awk -v t="$t" -v pol=$pol -v n="$n" -v e=$((e1 - e0)) -v o=$((o1 - o0)) -v p=$((p1 - p0)) -v hz="$(getconf CLK_TCK)" \
        'BEGIN { printf "%s %s rate %.0f edge %.1f origin %.1f us/req, preempted %.2f/req\n", t, pol, n / 3, e * 1e6 / hz / n, o * 1e6 / hz / n, p / n }'
    done
  done
  kill "$e" "$o"
done
