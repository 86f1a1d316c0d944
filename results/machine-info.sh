#!/usr/bin/env bash
# Prints the facts every committed result carries: date, git revision,
# machine and toolchain, then the command line given as arguments.
#   results/machine-info.sh "cargo bench ..." > DIR/machine.txt
echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
# Dirty: the code differs from that revision (results being written do not
# count, among them the file this is redirected into).
# Where there is no git or no toolchain (binaries built elsewhere,
# results/portable/), GIT_REVISION and RUSTC_VERSION say what built them.
if git rev-parse HEAD >/dev/null 2>&1; then
  echo "git: $(git rev-parse HEAD)$(git diff --quiet -- . ':!results' || echo ' (dirty)')"
else
  echo "git: ${GIT_REVISION:-unknown} (no git repository here)"
fi
echo "nproc: $(nproc)"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
echo "rustc: $(rustc --version 2>/dev/null || echo "${RUSTC_VERSION:-unknown} (no toolchain here)")"
echo "command: $*"
