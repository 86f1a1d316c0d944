#!/usr/bin/env bash
# Checks the deployment files offline, with what this machine has:
# - the Kubernetes manifests against the Kubernetes schemas
#   (kubernetes-validate from PyPI, which carries them: pip install kubernetes-validate),
# - the systemd unit (systemd-analyze verify),
# - that deploy/build-pgo.sh parses (bash -n),
# - with BUILD_IMAGE=1, the container image (podman build; BUILDER and BASE
#   pass other images for the two stages).
# A tool that is missing is said, not skipped silently. The Grafana
# dashboard and the configs inside the manifests are checked by
# `cargo test --test integration deploy::`.
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
if command -v kubernetes-validate >/dev/null; then
  kubernetes-validate --strict deploy/kubernetes/*.yaml || status=1
else
  echo "not checked: the Kubernetes manifests (pip install kubernetes-validate)"
fi
if command -v systemd-analyze >/dev/null; then
  unit=$(mktemp -d)/npamp-gateway@origin.service
  # verify wants the program to exist: point it at this build's.
  sed "s|/usr/local/bin/npamp-gateway|$PWD/target/release/npamp-gateway|" \
    deploy/systemd/npamp-gateway@.service > "$unit"
  # verify exits 0 on a value it ignores; what it says is the verdict.
  said=$(systemd-analyze verify "$unit" 2>&1) || status=1
  if [ -n "$said" ]; then echo "$said"; status=1; else echo "systemd unit: verified"; fi
else
  echo "not checked: the systemd unit (systemd-analyze is not here)"
fi
# The profile-guided build takes ten minutes, too long for every CI run:
# its syntax at least is checked here (run it before a release).
bash -n deploy/build-pgo.sh && echo "deploy/build-pgo.sh: parses" || status=1
if [ "${BUILD_IMAGE:-0}" = 1 ]; then
  args=()
  [ -n "${BUILDER:-}" ] && args+=(--build-arg "BUILDER=$BUILDER")
  [ -n "${BASE:-}" ] && args+=(--build-arg "BASE=$BASE")
  podman build "${args[@]}" -f deploy/Containerfile -t npamp-gateway:check . || status=1
fi
exit $status
