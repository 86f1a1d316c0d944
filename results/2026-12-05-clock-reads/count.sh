#!/usr/bin/env bash
# Clock reads per request of each gateway of a pair (edge HTTP ingress ->
# origin over TRANSPORT, tls by default, in front of a static nginx): a
# uprobe on libc's clock_gettime (every Instant::now and SystemTime::now
# comes through it, on to the vDSO), counted with `perf stat` on the edge
# and on the origin while wrk runs at IN_FLIGHT (4) for 3 s. For each
# BINARY in turn, ROUNDS (2) times, the builds alternated. UPSTREAMS=2
# gives the origin a group of two members (the same nginx under two URLs),
# the other path of Origin::post. CALLERS=1 also writes, for each build,
# where the reads come from (DWARF call graphs, 1 in 7 sampled) in
# OUT/callers-BUILD-SIDE.txt. Needs root, perf, nginx-light and wrk.
#   [TRANSPORT=tls|quic] [IN_FLIGHT=4] [ROUNDS=2] [UPSTREAMS=1|2] [CALLERS=1]
#   results/2026-12-05-clock-reads/count.sh OUT BINARY...
set -euo pipefail
OUT=$(realpath "$1"); shift
BINS=(); for b in "$@"; do BINS+=("$(realpath "$b")"); done
HERE=$(dirname "$(realpath "$0")")
cd "$HERE/../.."
TRANSPORT=${TRANSPORT:-tls}; C=${IN_FLIGHT:-4}; ROUNDS=${ROUNDS:-2}; UPSTREAMS=${UPSTREAMS:-1}
LIBC=$(ldconfig -p | awk '/libc.so.6 .*x86-64/ { print $NF; exit }')
[ -n "$LIBC" ] || { echo "libc.so.6 not found"; exit 1; }
source results/builds.sh
mkdir -p "$OUT"
perf probe -q -d 'probe_libc:clock_gettime' 2>/dev/null || true
perf probe -q -x "$LIBC" -a clock_gettime
trap 'perf probe -q -d "probe_libc:clock_gettime" 2>/dev/null || true; cleanup' EXIT
# pair NAME BINARY: like builds.sh's gateway_pair, with UPSTREAMS members.
pair() {
  local name=$1 bin=$2 opub epub peer ups=(--upstream "http://127.0.0.1:$UP_PORT/")
  [ "$UPSTREAMS" = 2 ] && ups+=(--upstream "http://127.0.0.1:$UP_PORT/second")
  opub=$("$bin" keygen --out "$TMP/$name-origin.key" --force)
  epub=$("$bin" keygen --out "$TMP/$name-edge.key" --force)
  start "${name}_origin" '^listening on' "$bin" serve --listen "$TRANSPORT://127.0.0.1:0" \
    "${ups[@]}" --identity "$TMP/$name-origin.key" --trust "$epub"
  peer=$(grep -m1 '^listening on' "$TMP/${name}_origin.out" | sed 's/^listening on //')
  start "${name}_edge" '^ingress' "$bin" serve --ingress http://127.0.0.1:0 --peer "$peer" \
    --identity "$TMP/$name-edge.key" --trust "$opub"
  printf -v "${name}_url" %s "$(grep -m1 '^ingress' "$TMP/${name}_edge.out" | sed 's/^ingress //')/"
}
i=0
for b in "${BINS[@]}"; do pair "b$i" "$b"; i=$((i + 1)); done
echo -e "round\tbuild\trequests\tedge reads/req\torigin reads/req" > "$OUT/counts.tsv"
for round in $(seq "$ROUNDS"); do
  for i in $(seq 0 $((${#BINS[@]} - 1))); do
    url_var="b${i}_url"; e_var="b${i}_edge_pid"; o_var="b${i}_origin_pid"
    url=${!url_var}; e=${!e_var}; o=${!o_var}
    wrk -t1 -c"$C" -d1s -s "$TMP/post.lua" "$url" > /dev/null
    perf stat -x, -e probe_libc:clock_gettime -p "$e" -o "$TMP/e.txt" -- sleep 3.4 & pe=$!
    perf stat -x, -e probe_libc:clock_gettime -p "$o" -o "$TMP/o.txt" -- sleep 3.4 & po=$!
    sleep 0.2
    n=$(wrk -t1 -c"$C" -d3s -s "$TMP/post.lua" "$url" | awk '/requests in/ { print $1 }')
    wait $pe $po
    per() { awk -F, -v n="$n" '/clock_gettime/ { printf "%.2f", $1 / n }' "$1"; }
    printf "%s\t%s\t%s\t%s\t%s\n" "$round" "$(basename "${BINS[i]}")" "$n" \
      "$(per "$TMP/e.txt")" "$(per "$TMP/o.txt")" | tee -a "$OUT/counts.tsv"
  done
done
[ "${CALLERS:-0}" = 1 ] || exit 0
for i in $(seq 0 $((${#BINS[@]} - 1))); do
  for side in edge origin; do
    url_var="b${i}_url"; pid_var="b${i}_${side}_pid"
    perf record -q -e probe_libc:clock_gettime -c 7 --call-graph dwarf,16384 -o "$TMP/c.data" -p "${!pid_var}" -- sleep 2.2 2>/dev/null & rec=$!
    sleep 0.2
    wrk -t1 -c"$C" -d2s -s "$TMP/post.lua" "${!url_var}" > /dev/null
    wait $rec
    perf script -i "$TMP/c.data" -F ip,sym 2>/dev/null > "$TMP/c.stacks"
    python3 "$HERE/callers.py" "$TMP/c.stacks" > "$OUT/callers-$(basename "${BINS[i]}")-$side.txt"
  done
done
