#!/usr/bin/env bash
# Packs what results/run-per-hop-scaling.sh needs, for a machine that has
# python3 and util-linux but no cargo, nginx or wrk (a lent many-core
# machine, say): the gateway (release, stripped), and nginx, wrk and openssl
# from this machine with the libraries they load, except glibc's own (the
# other machine's glibc must be as new as this one's: `ldd --version`).
# About 30 MB, into DIR (target/portable: ignored by git, and the folder
# to copy along with the checkout). Then, there: results/portable/run.sh.
# GATEWAY_BINARY packs another build of the gateway instead of this
# checkout's release build (deploy/build-pgo.sh's, say).
#   [GATEWAY_BINARY=PATH] results/portable/pack.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-target/portable}
GW=${GATEWAY_BINARY:-target/release/npamp-gateway}
[ -n "${GATEWAY_BINARY:-}" ] || cargo build --release -q -p npamp-gateway-cli
rm -rf "$OUT"
mkdir -p "$OUT/bin" "$OUT/real" "$OUT/lib"
strip -o "$OUT/real/npamp-gateway" "$GW"
for tool in nginx wrk openssl; do
  path=$(command -v "$tool") || { echo "$tool is not installed here"; exit 1; }
  cp -L "$path" "$OUT/real/$tool"
  ldd "$path" | awk '$3 ~ /^\// { print $3 }' | while read -r lib; do
    case $(basename "$lib") in
      libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*) ;;
      *) cp -Ln "$lib" "$OUT/lib/" ;;
    esac
  done
  # The wrapper the scripts find on PATH: the real program with its
  # libraries (and, for openssl, its configuration).
  cat > "$OUT/bin/$tool" <<SH
#!/bin/sh
here=\$(dirname "\$(readlink -f "\$0")")/..
export LD_LIBRARY_PATH="\$here/lib" OPENSSL_CONF="\$here/openssl.cnf"
exec "\$here/real/$tool" "\$@"
SH
  chmod +x "$OUT/bin/$tool"
done
cp -L "$(openssl version -d | sed 's/^OPENSSLDIR: "\(.*\)"$/\1/')/openssl.cnf" "$OUT/openssl.cnf"
{
  echo "GIT_REVISION=$(git rev-parse HEAD)$(git diff --quiet -- . ':!results' || echo '-dirty')"
  echo "RUSTC_VERSION='$(rustc --version)'"
  echo "PACKED_ON='$(date -u +%Y-%m-%dT%H:%M:%SZ), $(ldd --version | head -n 1)'"
} > "$OUT/build.env"
du -sh "$OUT"
