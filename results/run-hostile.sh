#!/usr/bin/env bash
# The hostile clients of the hardening work, at full size, against one or
# more builds of the gateway in turn (an earlier revision beside this one,
# on the same day): for each build and attack a fresh pair over QUIC (the
# build's own mock upstream <- origin <- edge, default limits), the attack
# (testkit's npamp-hostile, from 127.0.0.1) with a healthy client beside it
# (one request every 250 ms on a new connection from 127.0.0.2, 5 s
# timeout), and then the edge's and the origin's peak RSS (VmHWM) and, where
# the origin runs its MCP upstream as child processes, the most children it
# had at once. Then the checks that are a status code, not a size: a rebound
# Host over HTTP and WebSocket, a 100 kB HTTP/1.1 head, a batch larger than
# --rate-limit's burst. Writes OUT/BUILD-ATTACK.json and OUT/table.md.
#   [SECONDS_PER_ATTACK=30] [ATTACKS="h2-ping h2-bodies ..."] [OUT=DIR]
#   results/run-hostile.sh BINARY...
# Each build is named by its file name (name the copies by their revision).
# Loopback only; needs curl, python3 and `ulimit -n` of 10000 or more.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: run-hostile.sh BINARY..."; exit 2; }
BINS=(); for b in "$@"; do BINS+=("$(realpath "$b")"); done
SECS=${SECONDS_PER_ATTACK:-30}
ALL="h2-ping h2-bodies h1-trickle-20 h1-trickle-60 mcp-flood mcp-children mcp-herd ws-herd"
ATTACKS=${ATTACKS:-$ALL}
OUT=${OUT:-results/$(date -u +%Y-%m-%d)-hostile}
ulimit -n 20000 2>/dev/null || true
[ "$(ulimit -n)" -ge 10000 ] || { echo "ulimit -n is $(ulimit -n): 4200 connections need 10000"; exit 1; }
cargo build --release -q -p npamp-testkit --bin npamp-hostile
HOSTILE=$PWD/target/release/npamp-hostile
mkdir -p "$OUT"
TMP=$(mktemp -d)
source results/procs.sh
source results/nginx.sh
cleanup() { kill "${pids[@]}" 2>/dev/null || true; rm -rf "$TMP"; }
trap cleanup EXIT
results/machine-info.sh "SECONDS_PER_ATTACK=$SECS ATTACKS=\"$ATTACKS\" results/run-hostile.sh $(for b in "${BINS[@]}"; do printf '%s ' "$(basename "$b")"; done)" > "$OUT/machine.txt"

kb() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status"; }

# pair BIN KIND [EDGE_FLAGS...]: a fresh pair of BIN. KIND: json (HTTP and
# WebSocket ingress, HTTP mock upstream), mcp-http (MCP over Streamable
# HTTP at both ends, the mock as the MCP server), mcp-stdio (the origin
# runs the mock as one MCP stdio child per association). Sets EDGE, ORIGIN
# (pids), HTTP, WS (ingress URLs).
pair() {
  local bin=$1 kind=$2 opub epub peer up; shift 2
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  pids=(); sleep 0.5
  opub=$("$bin" keygen --out "$TMP/origin.key" --force)
  epub=$("$bin" keygen --out "$TMP/edge.key" --force)
  local origin=(--listen quic://127.0.0.1:0 --identity "$TMP/origin.key" --trust "$epub")
  local edge=(--ingress http://127.0.0.1:0 --identity "$TMP/edge.key" --trust "$opub")
  if [ "$kind" = mcp-stdio ]; then
    origin+=(--protocol mcp --upstream-cmd "$bin mock-upstream --stdio")
  else
    up=$(free_port)
    start mock '^mock upstream' "$bin" mock-upstream --listen "http://127.0.0.1:$up"
    origin+=(--upstream "http://127.0.0.1:$up")
    [ "$kind" = mcp-http ] && origin+=(--protocol mcp)
  fi
  case $kind in
    json) edge+=(--ingress ws://127.0.0.1:0) ;;
    *) edge+=(--protocol mcp) ;;
  esac
  start origin '^listening on' "$bin" serve "${origin[@]}"
  peer=$(grep -m1 '^listening on' "$TMP/origin.out" | sed 's/^listening on //')
  start edge '^ingress' "$bin" serve "${edge[@]}" --peer "$peer" "$@"
  sleep 0.3
  EDGE=$edge_pid; ORIGIN=$origin_pid
  HTTP=$(grep -m1 '^ingress http' "$TMP/edge.out" | sed 's/^ingress //')/
  HOSTPORT=${HTTP#http://}; HOSTPORT=${HOSTPORT%/}
  WS=$(grep -m1 '^ingress ws' "$TMP/edge.out" | sed 's/^ingress //' || true)
}

# attack NAME BUILD ARGS...: runs npamp-hostile with the healthy client,
# sampling the origin's children, and writes OUT/BUILD-NAME.json.
attack() {
  local name=$1 build=$2 most=0 most_kb=0 n kb c; shift 2
  # The origin's children, and their RSS summed (kB), every 0.2 s.
  ( while sleep 0.2; do
      n=0; kb=0
      for c in $(pgrep -P "$ORIGIN" 2>/dev/null); do
        n=$((n + 1)); kb=$((kb + $(awk '$1 == "VmRSS:" { print $2 }' "/proc/$c/status" 2>/dev/null || echo 0)))
      done
      echo "$n $kb"
    done ) > "$TMP/children" &
  local sampler=$!
  local healthy=(--healthy "$HTTP" --seconds "$SECS")
  case $name in mcp-*) healthy+=(--healthy-mcp) ;; esac
  "$HOSTILE" "${healthy[@]}" "$@" > "$TMP/attack.json" 2> "$TMP/attack.err" \
    || { echo "$build $name: npamp-hostile failed:"; cat "$TMP/attack.err"; }
  kill "$sampler" 2>/dev/null || true; wait "$sampler" 2>/dev/null || true
  while read -r n kb; do
    [ "$n" -gt "$most" ] && most=$n
    [ "${kb:-0}" -gt "$most_kb" ] && most_kb=$kb
  done < "$TMP/children"
  python3 - "$TMP/attack.json" "$build" "$name" "$(kb "$EDGE" VmHWM)" "$(kb "$ORIGIN" VmHWM)" "$most" "$most_kb" > "$OUT/$build-$name.json" <<'PY'
import json, sys
path, build, name, edge, origin, children, children_kb = sys.argv[1:]
try:
    r = json.load(open(path))
except ValueError:
    r = {"attack": name, "error": "no report"}
r.update(build=build, name=name, edge_peak_mib=int(edge) / 1024, origin_peak_mib=int(origin) / 1024,
         origin_children_most=int(children), origin_children_rss_mib=int(children_kb) / 1024)
print(json.dumps(r))
PY
  echo "$build $name: $(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); h=r.get('healthy',{}); print(f\"edge {r['edge_peak_mib']:.0f} MiB, origin {r['origin_peak_mib']:.0f} MiB, healthy {h.get('ok')}/{h.get('asked')} p99 {h.get('p99_ms')} ms; {json.dumps(r.get('attackers'))}\")" "$OUT/$build-$name.json")"
}

# check BUILD NAME EXPECTED COMMAND...: a status code, written to OUT/checks.tsv.
check() {
  local build=$1 name=$2; shift 2
  printf '%s\t%s\t%s\n' "$build" "$name" "$("$@" 2>/dev/null || echo failed)" | tee -a "$OUT/checks.tsv"
}
status() { curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$@" || true; }

: > "$OUT/checks.tsv"
for bin in "${BINS[@]}"; do
  build=$(basename "$bin")
  for a in $ATTACKS; do
    case $a in
      h2-ping) pair "$bin" json; attack "$a" "$build" h2-ping --target "$HOSTPORT" ;;
      h2-bodies) pair "$bin" json; attack "$a" "$build" h2-bodies --target "$HOSTPORT" ;;
      h1-trickle-*) pair "$bin" json; attack "$a" "$build" h1-trickle --target "$HOSTPORT" --connections "${a#h1-trickle-}" ;;
      mcp-flood) pair "$bin" mcp-http; attack "$a" "$build" mcp-flood --url "$HTTP" ;;
      mcp-children) pair "$bin" mcp-stdio; attack "$a" "$build" mcp-flood --url "$HTTP" --sessions 100 ;;
      mcp-herd) pair "$bin" mcp-http; attack "$a" "$build" mcp-herd --url "$HTTP" ;;
      ws-herd) pair "$bin" json; attack "$a" "$build" ws-herd --url "$WS" ;;
      *) echo "no attack $a (known: $ALL)"; exit 2 ;;
    esac
  done
  pair "$bin" json --rate-limit 20
  body='{"jsonrpc":"2.0","id":1,"method":"echo","params":[]}'
  batch="[$body,$body,$body,$body,$body]"
  check "$build" "own address (200)" status -H 'content-type: application/json' -d "$body" "$HTTP"
  check "$build" "rebound Host, HTTP (403 wanted)" status -H 'content-type: application/json' \
    -H 'host: rebind.attacker.example' -H 'origin: http://rebind.attacker.example' -d "$body" "$HTTP"
  check "$build" "rebound Host, WebSocket (403 wanted)" status -H 'host: rebind.attacker.example' \
    -H 'origin: http://rebind.attacker.example' -H 'connection: Upgrade' -H 'upgrade: websocket' \
    -H 'sec-websocket-version: 13' -H 'sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==' "${WS/ws:/http:}"
  printf 'x-pad: %s\n' "$(head -c 100000 /dev/zero | tr '\0' a)" > "$TMP/pad.txt"
  check "$build" "100 kB HTTP/1.1 head (431 wanted)" status -H 'content-type: application/json' \
    -H @"$TMP/pad.txt" -d "$body" "$HTTP"
  sleep 1.2
  check "$build" "batch of 5, --rate-limit 20, after 1.2 s (not 429)" status -H 'content-type: application/json' -d "$batch" "$HTTP"
done

python3 - "$OUT" <<'PY' > "$OUT/table.md"
import glob, json, os, sys
out = sys.argv[1]
rows = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(out, "*.json")))]
print("| attack | build | edge peak MiB | origin peak MiB | origin's children: most, their RSS MiB | healthy ok / asked | healthy p99 ms | attackers got |")
print("|---|---|---:|---:|---:|---:|---:|---|")
for r in sorted(rows, key=lambda r: (r["name"], r["build"])):
    h = r.get("healthy", {})
    got = r.get("attackers", {})
    got = {k: v for k, v in got.items() if isinstance(v, dict) or k.startswith(("closed", "still", "connect"))}
    print(f"| {r['name']} | {r['build']} | {r['edge_peak_mib']:.0f} | {r['origin_peak_mib']:.0f} | {r['origin_children_most']}, {r.get('origin_children_rss_mib', 0):.0f} "
          f"| {h.get('ok')} / {h.get('asked')} | {h.get('p99_ms')} | {json.dumps(got)} |")
print()
print("| check | build | status |")
print("|---|---|---|")
for line in open(os.path.join(out, "checks.tsv")):
    b, name, status = line.rstrip("\n").split("\t")
    print(f"| {name} | {b} | {status} |")
PY
cat "$OUT/table.md"
