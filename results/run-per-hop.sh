#!/usr/bin/env bash
# Per-hop cost, in one run on 127.0.0.1: wrk closed loop (one small JSON-RPC
# POST, --latency) at 1, 4, 32 and 256 in flight through four paths to one
# upstream:
#   direct        the upstream itself,
#   gateway-quic  an npamp-gateway pair over QUIC (edge HTTP ingress -> origin),
#   gateway-tls   the same pair over TCP + TLS 1.3,
#   nginx-tls     two nginx in series, TLS 1.3 with keep-alive between them.
# UPSTREAM=static (default): a third nginx answering every POST with a fixed
# JSON-RPC reply (`return 200`), so the upstream is never the bottleneck;
# UPSTREAM=mock: the project's mock upstream. For every point: the rate,
# p50 / p99 latency (wrk's, corrected for coordinated omission, so one
# long stall lifts p99; points.tsv also keeps wrk's raw maximum), the CPU
# per request of every process on the path (utime + stime deltas of
# /proc/PID/stat, all of an nginx's workers together), and the context
# switches per request of the edge and the origin (every thread's,
# voluntary and involuntary, and apart the involuntary ones: preempted),
# the UDP datagrams per request of the QUIC paths (both ways, from
# /proc/net/snmp) and how idle the run's CPUs were. ROUNDS (2) repeats
# the whole sweep, paths in turn within each concurrency, so drift on a
# shared machine shows as spread, not as a difference; each round starts
# one path later than the one before, so every path takes every place in
# the order across as many rounds as there are paths (on one vCPU the path
# run later at a point was favoured by up to 6 %:
# results/2026-12-04-udp-wakeups/). SECONDS_PER_POINT (5). GATEWAY_ENV:
# variables for both gateways' processes (e.g. "TOKIO_WORKER_THREADS=1"). LANES=N (N > 1)
# adds two paths, gateway-quic-xN and gateway-tls-xN: N independent
# gateway pairs of one tokio worker each (a runtime per core, as nginx's
# worker processes, simulated with processes), the in-flight requests split
# evenly among N wrk, one per pair (fewer at 1 in flight); the rate is their
# sum, p50 and p99 the worst of them, the CPU that of all N pairs. Needs
# Debian's nginx-light and wrk. IN_FLIGHT ("1 4 32 256") chooses the points;
# WRK_THREADS the threads of one wrk (default 1 below 32 in flight, else 2;
# never more than in flight). NGINX_WORKERS: each nginx's worker processes
# (default nproc).
# Every process takes the CPU affinity it is started with
# (run-per-hop-scaling.sh runs the whole of this on 1, 2, 4 ... cores).
#   [UPSTREAM=static|mock] [ROUNDS=2] [IN_FLIGHT="1 4 32 256"] [WRK_THREADS=N]
#   [GATEWAY_ENV=...] [LANES=N] [OUT=DIR] results/run-per-hop.sh
set -euo pipefail
cd "$(dirname "$0")/.."
UPSTREAM=${UPSTREAM:-static}; ROUNDS=${ROUNDS:-2}; SECS=${SECONDS_PER_POINT:-5}; LANES=${LANES:-1}
IN_FLIGHT=${IN_FLIGHT:-1 4 32 256}
read -r -a GENV <<<"${GATEWAY_ENV:-}"
OUT=${OUT:-results/$(date -u +%Y-%m-%d)-per-hop-$UPSTREAM}
command -v nginx >/dev/null || { echo "nginx is not installed (apt-get install nginx-light)"; exit 1; }
command -v wrk >/dev/null || { echo "wrk is not installed (apt-get install wrk)"; exit 1; }
mkdir -p "$OUT"
[ "$LANES" -gt 1 ] && LANES_ARG=" LANES=$LANES"
source results/lib.sh
NGX=$(mktemp -d); chmod 755 "$NGX"
stop_nginx() { for n in static front back; do [ -f "$NGX/$n.pid" ] && kill "$(cat "$NGX/$n.pid")" 2>/dev/null || true; done; rm -rf "$NGX"; }
trap 'stop_nginx; cleanup' EXIT
WORKERS=${NGINX_WORKERS:-$(nproc)}
source results/nginx.sh
if [ "$UPSTREAM" = static ]; then
  UP_PORT=$(free_port)
  nginx_static "$UP_PORT"
  UP=http://127.0.0.1:$UP_PORT
else
  start mock '^mock upstream' "$GW" mock-upstream --listen http://127.0.0.1:0
  UP=$(field mock 'mock upstream ')
fi
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
  -subj /CN=localhost -keyout "$NGX/key.pem" -out "$NGX/cert.pem" 2>/dev/null
FRONT_PORT=$(free_port); BACK_PORT=$(free_port)
UP_HOSTPORT=${UP#http://}
nginx_conf back "
  upstream up { server $UP_HOSTPORT; keepalive 256; }
  server {
    listen 127.0.0.1:$BACK_PORT ssl;
    ssl_certificate $NGX/cert.pem; ssl_certificate_key $NGX/key.pem;
    ssl_protocols TLSv1.3;
    location / { proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection \"\"; }
  }"
nginx_conf front "
  upstream back { server 127.0.0.1:$BACK_PORT; keepalive 256; }
  server {
    listen 127.0.0.1:$FRONT_PORT;
    location / {
      proxy_pass https://back; proxy_http_version 1.1; proxy_set_header Connection \"\";
      proxy_ssl_protocols TLSv1.3; proxy_ssl_session_reuse on;
    }
  }"
origin_pub=$("$GW" keygen --out "$TMP/origin.key")
edge_pub=$("$GW" keygen --out "$TMP/edge.key")
start origin '^listening on tls' env ${GENV[@]+"${GENV[@]}"} "$GW" serve --listen quic://127.0.0.1:0 --listen tls://127.0.0.1:0 \
  --upstream "$UP" --identity "$TMP/origin.key" --trust "$edge_pub"
QUIC=$(grep -m1 '^listening on quic' "$TMP/origin.out" | sed 's/^listening on //')
TLS=$(grep -m1 '^listening on tls' "$TMP/origin.out" | sed 's/^listening on //')
start edge-quic '^ingress' env ${GENV[@]+"${GENV[@]}"} "$GW" serve --ingress http://127.0.0.1:0 --peer "$QUIC" \
  --identity "$TMP/edge.key" --trust "$origin_pub"
start edge-tls '^ingress' env ${GENV[@]+"${GENV[@]}"} "$GW" serve --ingress http://127.0.0.1:0 --peer "$TLS" \
  --identity "$TMP/edge.key" --trust "$origin_pub"
PATHS=(direct gateway-quic gateway-tls nginx-tls)
LANE_QUIC=(); LANE_TLS=(); LANE_EQ_PIDS=""; LANE_ET_PIDS=""; LANE_ORIGIN_PIDS=""
if [ "$LANES" -gt 1 ]; then
  for l in $(seq "$LANES"); do
    one=(env TOKIO_WORKER_THREADS=1 ${GENV[@]+"${GENV[@]}"} "$GW" serve --identity)
    start "origin-$l" '^listening on tls' "${one[@]}" "$TMP/origin.key" --trust "$edge_pub" \
      --listen quic://127.0.0.1:0 --listen tls://127.0.0.1:0 --upstream "$UP"
    q=$(grep -m1 '^listening on quic' "$TMP/origin-$l.out" | sed 's/^listening on //')
    t=$(grep -m1 '^listening on tls' "$TMP/origin-$l.out" | sed 's/^listening on //')
    start "lane-quic-$l" '^ingress' "${one[@]}" "$TMP/edge.key" --trust "$origin_pub" \
      --ingress http://127.0.0.1:0 --peer "$q"
    start "lane-tls-$l" '^ingress' "${one[@]}" "$TMP/edge.key" --trust "$origin_pub" \
      --ingress http://127.0.0.1:0 --peer "$t"
    LANE_QUIC+=("$(grep -m1 '^ingress' "$TMP/lane-quic-$l.out" | sed 's/^ingress //')/")
    LANE_TLS+=("$(grep -m1 '^ingress' "$TMP/lane-tls-$l.out" | sed 's/^ingress //')/")
    v=origin_${l}_pid; LANE_ORIGIN_PIDS+=" ${!v}"
    v=lane_quic_${l}_pid; LANE_EQ_PIDS+=" ${!v}"
    v=lane_tls_${l}_pid; LANE_ET_PIDS+=" ${!v}"
  done
  PATHS+=("gateway-quic-x$LANES" "gateway-tls-x$LANES")
fi
sleep 0.5
EDGE_QUIC=$(grep -m1 '^ingress' "$TMP/edge-quic.out" | sed 's/^ingress //')
EDGE_TLS=$(grep -m1 '^ingress' "$TMP/edge-tls.out" | sed 's/^ingress //')
cat > "$TMP/post.lua" <<'LUA'
wrk.method = "POST"
wrk.body = '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}'
wrk.headers["Content-Type"] = "application/json"
LUA
# Every pid of an nginx instance (master and workers), or one pid.
nginx_pids() { local m; m=$(cat "$NGX/$1.pid"); echo "$m $(pgrep -P "$m" | tr '\n' ' ')"; }
up_pids() { if [ "$UPSTREAM" = static ]; then nginx_pids static; else echo "$mock_pid"; fi; }
# ticks, switches, preempted and udp_in: results/procs.sh. Every path runs
# alone, so the UDP datagrams of a point are the QUIC association's, both
# ways. idle: the idle ticks of the CPUs this run may use (/proc/stat: idle
# + iowait).
MY_CPUS=$(python3 -c 'import os; print(" ".join(f"cpu{c}" for c in sorted(os.sched_getaffinity(0))))')
idle() { awk -v cpus=" $MY_CPUS " 'index(cpus, " " $1 " ") { n += $5 + $6 } END { print n + 0 }' /proc/stat; }
results/machine-info.sh "UPSTREAM=$UPSTREAM ROUNDS=$ROUNDS SECONDS_PER_POINT=$SECS IN_FLIGHT=\"$IN_FLIGHT\"${WRK_THREADS:+ WRK_THREADS=$WRK_THREADS}${GATEWAY_ENV:+ GATEWAY_ENV=\"$GATEWAY_ENV\"}${LANES_ARG:-}${NGINX_WORKERS:+ NGINX_WORKERS=$NGINX_WORKERS} results/run-per-hop.sh" > "$OUT/machine.txt"
echo "CPUs this run may use: $(nproc) ($(taskset -pc $$ | sed 's/.*: //'))" >> "$OUT/machine.txt"
echo "gateway processes started in: START_SESSION=$START_SESSION (results/procs.sh); autogroup: kernel.sched_autogroup_enabled=$(cat /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null || echo absent)" >> "$OUT/machine.txt"
echo "nginx: $(nginx -v 2>&1); wrk: $(wrk -v 2>&1 | head -1)" >> "$OUT/machine.txt"
HZ=$(getconf CLK_TCK)
# wrk_on C THREADS URL...: C in flight for SECS, split evenly over one wrk
# per URL (as many as C allows), in parallel; their outputs in $TMP/wrk-I.txt.
wrk_on() {
  local c=$1 threads=$2; shift 2
  local urls=("$@") n=${#@} i running=()
  [ "$n" -gt "$c" ] && n=$c
  [ "$n" -gt 1 ] && threads=1
  rm -f "$TMP"/wrk-*.txt
  for i in $(seq 0 $((n - 1))); do
    wrk -t$threads -c$((c / n)) -d${SECS}s --latency -s "$TMP/post.lua" "${urls[i]}" > "$TMP/wrk-$i.txt" &
    running+=($!)
  done
  wait "${running[@]}"
}
# quantile Q: latency quantile Q (50%, 99%) of each wrk run, comma-separated
# (the table takes the worst).
quantile() { awk -v q="$1" '$1 == q { print $2 }' "$TMP"/wrk-*.txt | paste -sd, -; }
: > "$OUT/points.tsv"
for round in $(seq "$ROUNDS"); do
  for c in $IN_FLIGHT; do
    threads=1; [ "$c" -ge 32 ] && threads=2
    threads=${WRK_THREADS:-$threads}; [ "$threads" -gt "$c" ] && threads=$c  # wrk: threads <= connections
    n=${#PATHS[@]}; first=$(( (round - 1) % n ))
    for path in "${PATHS[@]:first}" "${PATHS[@]:0:first}"; do
      case $path in
        direct) urls=("$UP/"); hops=("up:$(up_pids)") ;;
        gateway-quic) urls=("$EDGE_QUIC/"); hops=("edge:$edge_quic_pid" "origin:$origin_pid" "up:$(up_pids)") ;;
        gateway-tls) urls=("$EDGE_TLS/"); hops=("edge:$edge_tls_pid" "origin:$origin_pid" "up:$(up_pids)") ;;
        nginx-tls) urls=("http://127.0.0.1:$FRONT_PORT/"); hops=("edge:$(nginx_pids front)" "origin:$(nginx_pids back)" "up:$(up_pids)") ;;
        gateway-quic-x*) urls=("${LANE_QUIC[@]}"); hops=("edge:$LANE_EQ_PIDS" "origin:$LANE_ORIGIN_PIDS" "up:$(up_pids)") ;;
        gateway-tls-x*) urls=("${LANE_TLS[@]}"); hops=("edge:$LANE_ET_PIDS" "origin:$LANE_ORIGIN_PIDS" "up:$(up_pids)") ;;
      esac
      for url in "${urls[@]}"; do wrk -t1 -c4 -d1s -s "$TMP/post.lua" "$url" > /dev/null; done  # warm
      before=(); sw_before=(); pre_before=()
      for h in "${hops[@]}"; do
        read -r -a p <<<"${h#*:}"
        before+=("$(ticks "${p[@]}")"); sw_before+=("$(switches "${p[@]}")"); pre_before+=("$(preempted "${p[@]}")")
      done
      udp0=$(udp_in); idle0=$(idle)
      wrk_on "$c" "$threads" "${urls[@]}"
      line="$round\t$c\t$path\tudp=$(( $(udp_in) - udp0 ))\tidle=$(( $(idle) - idle0 ))"
      i=0; for h in "${hops[@]}"; do
        read -r -a p <<<"${h#*:}"
        line+="\t${h%%:*}=$(( $(ticks "${p[@]}") - before[i] ))\t${h%%:*}_sw=$(( $(switches "${p[@]}") - sw_before[i] ))"
        line+="\t${h%%:*}_pre=$(( $(preempted "${p[@]}") - pre_before[i] ))"
        i=$((i+1))
      done
      # The sum of the requests; p50 and p99 of every wrk run.
      reqs=$(awk '/requests in/ { n += $1 } END { print n }' "$TMP"/wrk-*.txt)
      errors=$(awk '/Non-2xx|Socket errors/ { print }' "$TMP"/wrk-*.txt | tr '\n' ' ')
      p50=$(quantile 50%); p99=$(quantile 99%)
      max=$(awk '$1 == "Latency" && NF == 5 { print $4 }' "$TMP"/wrk-*.txt | paste -sd, -)
      printf "%b\treqs=%s\tp50=%s\tp99=%s\tmax=%s\terrors=%s\n" "$line" "$reqs" "$p50" "$p99" "$max" "${errors:-none}" | tee -a "$OUT/points.tsv"
    done
  done
done
python3 - "$OUT/points.tsv" "$HZ" "$SECS" "$(wc -w <<<"$MY_CPUS")" > "$OUT/table.md" <<'PY'
import sys, collections
path, hz, secs, ncpu = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
def ms(v):
    for unit, f in (("us", 1e-3), ("ms", 1.0), ("s", 1e3)):
        if v.endswith(unit) and (unit != "s" or not v.endswith(("us", "ms"))):
            return float(v[: -len(unit)]) * f
    return float("nan")
rows = collections.defaultdict(list)
for line in open(path):
    f = line.rstrip("\n").split("\t")
    rnd, c, p = f[0], int(f[1]), f[2]
    kv = dict(x.split("=", 1) for x in f[3:])
    n = int(kv["reqs"])
    cpu = {k: int(kv[k]) * 1e6 / hz / n for k in ("edge", "origin", "up") if k in kv}
    worst = lambda q: max(ms(v) for v in kv[q].split(","))  # of the wrk runs
    sw = {k: int(kv[k + "_sw"]) / n for k in ("edge", "origin") if k + "_sw" in kv}
    pre = {k: int(kv[k + "_pre"]) / n for k in ("edge", "origin") if k + "_pre" in kv}
    # Older points.tsv files have neither udp= nor idle=.
    udp = int(kv["udp"]) / n if "udp" in kv and "quic" in p else None
    idle = 100 * int(kv["idle"]) / (hz * secs * ncpu) if "idle" in kv else None
    rows[(c, p)].append((n / secs, worst("p50"), worst("p99"), cpu, kv["errors"], sw, pre, udp, idle))
def span(xs, fmt):
    lo, hi = min(xs), max(xs)
    return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else (fmt + "–" + fmt).format(lo, hi)
print("| in flight | path | req/s | p50 ms | p99 ms | CPU µs/req: edge | origin | upstream | switches/req: edge | origin | vs nginx pair: rate | edge CPU | origin CPU | of the switches, preempted: edge | origin | UDP datagrams/req | CPUs idle % |")
print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
paths = list(dict.fromkeys(p for _, p in rows))
for c in sorted({c for c, _ in rows}):
    ng = rows.get((c, "nginx-tls"))
    for p in paths:
        r = rows.get((c, p))
        if not r:
            continue
        cols = [span([x[0] / 1000 for x in r], "{:.1f}") + " k", span([x[1] for x in r], "{:.3f}"), span([x[2] for x in r], "{:.3f}")]
        for k in ("edge", "origin", "up"):
            v = [x[3][k] for x in r if k in x[3]]
            cols.append(span(v, "{:.0f}") if v else "—")
        for k in ("edge", "origin"):
            v = [x[5][k] for x in r if k in x[5]]
            cols.append(span(v, "{:.2f}") if v else "—")
        if ng and p.startswith("gateway"):
            # Same round against the same round: ratios within one run.
            rate = [a[0] / b[0] for a, b in zip(r, ng)]
            ecpu = [a[3]["edge"] / b[3]["edge"] for a, b in zip(r, ng)]
            ocpu = [a[3]["origin"] / b[3]["origin"] for a, b in zip(r, ng)]
            cols += [span(rate, "{:.2f}"), span(ecpu, "{:.2f}"), span(ocpu, "{:.2f}")]
        else:
            cols += ["", "", ""]
        for k in ("edge", "origin"):
            v = [x[6][k] for x in r if k in x[6]]
            cols.append(span(v, "{:.2f}") if v else "—")
        for i, fmt in ((7, "{:.2f}"), (8, "{:.0f}")):
            v = [x[i] for x in r if x[i] is not None]
            cols.append(span(v, fmt) if v else "—")
        errs = {x[4] for x in r} - {"none"}
        print(f"| {c} | {p}{' (errors: ' + '; '.join(errs) + ')' if errs else ''} | " + " | ".join(cols) + " |")
d1 = rows.get((1, "direct"))
for p in (p for p in paths if p != "direct"):
    r = rows.get((1, p))
    if r and d1:
        add50 = [(a[1] - b[1]) * 1000 for a, b in zip(r, d1)]
        add99 = [(a[2] - b[2]) * 1000 for a, b in zip(r, d1)]
        print(f"\nAdded latency at 1 in flight over direct, {p}: p50 {span(add50, '{:.0f}')} µs, p99 {span(add99, '{:.0f}')} µs")
PY
cat "$OUT/table.md"
