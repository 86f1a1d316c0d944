#!/usr/bin/env bash
# Builds deploy/Containerfile on a machine that reaches Debian's packages
# and crates.io but no container registry, and cannot run containers (so
# RUN steps use podman's chroot isolation). The two FROM images are local
# stand-ins, passed as build arguments:
#   BASE    a minimal Debian bookworm made with debootstrap;
#   BUILDER the same, with gcc and this machine's stable Rust toolchain
#           copied in, and this machine's CA bundle (its HTTPS may go
#           through a proxy with a CA of its own).
# Then it checks what it can without running a container: the image's
# user, entry point and ports, and the binary copied out of it, run here.
# Needs root, podman and debootstrap (Debian packages). OUT: where the
# results go (default: this folder). Build arguments of the Containerfile
# (e.g. PGO=0) can be given as BUILD_ARGS="--build-arg PGO=0".
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-results/2026-12-01-container}
mkdir -p "$OUT"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
debootstrap --variant=minbase bookworm "$work/root" http://deb.debian.org/debian >/dev/null
tar -C "$work/root" -c . | podman import - localhost/debian:bookworm-local >/dev/null
mkdir "$work/builder"
cp -a "$(rustc --print sysroot)" "$work/builder/rust"
cp "${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}" "$work/builder/ca-bundle.crt"
cat > "$work/builder/Containerfile" <<'CF'
FROM localhost/debian:bookworm-local
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev binutils ca-certificates && rm -rf /var/lib/apt/lists/*
COPY rust /usr/local/rust
COPY ca-bundle.crt /etc/ssl/certs/ca-certificates.crt
ENV PATH=/usr/local/rust/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
CF
podman build --isolation=chroot -t localhost/rust-local "$work/builder" >/dev/null
results/machine-info.sh "OUT=$OUT ${BUILD_ARGS:+BUILD_ARGS=\"$BUILD_ARGS\" }results/2026-12-01-container/build-local.sh" > "$OUT/machine.txt"
{ time podman build --isolation=chroot ${BUILD_ARGS:-} --build-arg BUILDER=localhost/rust-local \
    --build-arg BASE=localhost/debian:bookworm-local -f deploy/Containerfile -t npamp-gateway:local . ; } \
  > "$OUT/build.log" 2>&1
podman image inspect localhost/npamp-gateway:local \
  --format 'size {{.Size}} octets; user {{.Config.User}}; entrypoint {{.Config.Entrypoint}}; cmd {{.Config.Cmd}}; ports {{.Config.ExposedPorts}}' \
  | tee "$OUT/image.txt"
id=$(podman create localhost/npamp-gateway:local)
podman cp "$id:/usr/local/bin/npamp-gateway" "$work/npamp-gateway"
podman rm "$id" >/dev/null
{ echo "the binary copied out of the image, run here:"; "$work/npamp-gateway" --version; "$work/npamp-gateway" self-check | tail -n 1; } | tee -a "$OUT/image.txt"
{ echo "podman run:"; podman run --rm localhost/npamp-gateway:local --version 2>&1 || true; } | tee -a "$OUT/image.txt"
