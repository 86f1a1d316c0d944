#!/usr/bin/env bash
# What checking a client's credential costs an edge, in one run on
# 127.0.0.1: three edges of one build in front of one origin (over QUIC)
# and one static nginx upstream: `none` (no client authentication),
# `tokens` (--auth-token-file: a SHA-256 of the token compared with the
# file's) and `oauth` (--oauth-issuer: an ES256 JWT access token checked
# against the issuer's JWKS, served here by nginx; keys made with openssl,
# the token signed with it). wrk closed loop at IN_FLIGHT (4) for
# SECONDS_PER_POINT (5) per edge, the edges in turn, ROUNDS (3) times.
# Prints each edge's rate and its CPU per request (utime + stime of
# /proc/PID/stat over the requests wrk completed), and each against `none`.
# Needs Debian's nginx-light, wrk and openssl.
#   results/run-oauth-cost.sh BINARY [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(realpath "$1"); OUT=${2:-}
ROUNDS=${ROUNDS:-3}; SECS=${SECONDS_PER_POINT:-5}; C=${IN_FLIGHT:-4}
source results/builds.sh
HZ=$(getconf CLK_TCK)

# The issuer: an EC P-256 key, its JWKS, and a token for the edge.
ISSUER_PORT=$(free_port)
ISSUER="http://127.0.0.1:$ISSUER_PORT"
AUDIENCE="https://edge.example/rpc"
mkdir -p "$NGX/issuer"
openssl ecparam -name prime256v1 -genkey -noout -out "$TMP/issuer.pem" 2>/dev/null
openssl ec -in "$TMP/issuer.pem" -pubout -outform DER -out "$TMP/issuer.pub.der" 2>/dev/null
python3 - "$TMP/issuer.pem" "$TMP/issuer.pub.der" "$ISSUER" "$AUDIENCE" "$NGX/issuer/jwks.json" "$TMP/jwt" <<'PY'
import base64, json, subprocess, sys, time
pem, pub, issuer, audience, jwks_path, token_path = sys.argv[1:]
b64 = lambda b: base64.urlsafe_b64encode(b).rstrip(b"=").decode()
point = open(pub, "rb").read()[-65:]
json.dump({"keys": [{"kty": "EC", "crv": "P-256", "kid": "k1", "use": "sig",
                     "x": b64(point[1:33]), "y": b64(point[33:65])}]}, open(jwks_path, "w"))
head = b64(json.dumps({"alg": "ES256", "kid": "k1", "typ": "JWT"}).encode())
body = b64(json.dumps({"iss": issuer, "aud": audience, "sub": "load", "scope": "rpc:call",
                       "exp": int(time.time()) + 3600}).encode())
der = subprocess.run(["openssl", "dgst", "-sha256", "-sign", pem], input=f"{head}.{body}".encode(),
                     capture_output=True, check=True).stdout
# ECDSA-Sig-Value ::= SEQUENCE { r INTEGER, s INTEGER }, as JWS's r || s.
i = 2 + (der[1] & 0x7F if der[1] & 0x80 else 0)
lr = der[i + 1]; r = der[i + 2:i + 2 + lr]; j = i + 2 + lr
ls = der[j + 1]; s = der[j + 2:j + 2 + ls]
sig = r.lstrip(b"\0").rjust(32, b"\0") + s.lstrip(b"\0").rjust(32, b"\0")
open(token_path, "w").write(f"{head}.{body}.{b64(sig)}")
PY
nginx_conf issuer "
  server {
    listen 127.0.0.1:$ISSUER_PORT;
    default_type application/json;
    location / { root $NGX/issuer; }
  }"
TOKEN=client-token-0123456789abcdef
echo "$TOKEN" > "$TMP/tokens"

opub=$("$BIN" keygen --out "$TMP/origin.key" --force)
epub=$("$BIN" keygen --out "$TMP/edge.key" --force)
start origin '^listening on' "$BIN" serve --listen quic://127.0.0.1:0 \
  --upstream "http://127.0.0.1:$UP_PORT" --identity "$TMP/origin.key" --trust "$epub"
peer=$(grep -m1 '^listening on' "$TMP/origin.out" | sed 's/^listening on //')
declare -A EXTRA=(
  [none]=""
  [tokens]="--auth-token-file $TMP/tokens"
  [oauth]="--oauth-issuer $ISSUER --oauth-jwks $ISSUER/jwks.json --oauth-audience $AUDIENCE --oauth-scope rpc:call"
)
declare -A URL BEARER=([none]="" [tokens]="$TOKEN" [oauth]="$(cat "$TMP/jwt")")
for e in none tokens oauth; do
  # shellcheck disable=SC2086
  start "edge_$e" '^ingress' "$BIN" serve --ingress http://127.0.0.1:0 --peer "$peer" \
    --identity "$TMP/edge.key" --trust "$opub" ${EXTRA[$e]}
  URL[$e]="$(grep -m1 '^ingress' "$TMP/edge_$e.out" | sed 's/^ingress //')/"
  { cat "$TMP/post.lua"; [ -n "${BEARER[$e]}" ] && echo "wrk.headers[\"Authorization\"] = \"Bearer ${BEARER[$e]}\""; } \
    > "$TMP/post-$e.lua"
  # Each edge answers before it is measured (an OAuth edge fetches its keys).
  code=$(curl -s -o /dev/null -w '%{http_code}' -H 'content-type: application/json' \
    ${BEARER[$e]:+-H "authorization: Bearer ${BEARER[$e]}"} \
    -d '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}' "${URL[$e]}")
  [ "$code" = 200 ] || { echo "edge $e answered $code"; cat "$TMP/edge_$e.err"; exit 1; }
done

rows=$TMP/rows.tsv; : > "$rows"
for round in $(seq "$ROUNDS"); do
  for e in none tokens oauth; do
    pid_var="edge_${e}_pid"; pid=${!pid_var}
    t0=$(ticks "$pid")
    wrk -t1 -c"$C" -d"${SECS}s" -s "$TMP/post-$e.lua" "${URL[$e]}" > "$TMP/wrk-$e-$round.txt"
    t1=$(ticks "$pid")
    n=$(awk '/requests in/ {print $1}' "$TMP/wrk-$e-$round.txt")
    bad=$(awk '/Non-2xx/ {print $5}' "$TMP/wrk-$e-$round.txt")
    [ -z "$bad" ] || { echo "edge $e: $bad non-2xx answers"; exit 1; }
    printf '%s\t%s\t%s\t%s\n' "$e" "$round" "$n" "$(( t1 - t0 ))" >> "$rows"
  done
done
{
  echo "# $(date -u +%FT%TZ), $(nproc) CPUs; wrk -c$C, ${SECS}s per edge, $ROUNDS rounds"
  python3 - "$rows" "$HZ" "$SECS" <<'PY'
import collections, statistics, sys
rows, hz, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
by = collections.defaultdict(list)
for line in open(rows):
    e, r, n, t = line.split()
    by[e].append((int(n), int(t)))
cpu = {e: [t / hz / n * 1e6 for n, t in v] for e, v in by.items()}
rate = {e: [n / secs for n, _ in v] for e, v in by.items()}
print("| edge | requests/s, each round | CPU µs per request at the edge, each round | median | / none |")
print("|---|---|---|---:|---:|")
base = statistics.median(cpu["none"])
for e in ("none", "tokens", "oauth"):
    m = statistics.median(cpu[e])
    print(f"| {e} | {' / '.join(f'{x:.0f}' for x in rate[e])} | "
          f"{' / '.join(f'{x:.1f}' for x in cpu[e])} | {m:.1f} | {m / base:.3f} |")
PY
} | tee "$TMP/table.md"
if [ -n "$OUT" ]; then
  mkdir -p "$OUT"
  cp "$TMP/table.md" "$OUT/table.md"
  results/machine-info.sh "results/run-oauth-cost.sh $(basename "$BIN") $OUT" > "$OUT/machine.txt"
fi
