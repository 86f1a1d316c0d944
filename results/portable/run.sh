#!/usr/bin/env bash
# The issue's scaling run (results/run-per-hop-scaling.sh) on a machine
# without cargo, nginx or wrk, with what results/portable/pack.sh packed
# (BUNDLE, default target/portable). First it checks that taskset confines
# a process to its CPUs (affinity.txt): some sandboxes (gVisor) accept the
# call and let the threads run anywhere, and then a "1 core" point is not
# one core. Then the run, into OUT_DIR; and OUT_DIR.tar.gz of it all.
#   [CORES="1 2 4 8 16"] [IN_FLIGHT=256] [ROUNDS=2] [SECONDS_PER_POINT=5]
#   results/portable/run.sh OUT_DIR
set -euo pipefail
cd "$(dirname "$0")/../.."
DIR=$1
B=$(realpath "${BUNDLE:-target/portable}")
[ -x "$B/real/npamp-gateway" ] || { echo "no bundle at $B (results/portable/pack.sh)"; exit 1; }
set -a; source "$B/build.env"; set +a
export PATH="$B/bin:$PATH" GATEWAY_BINARY="$B/real/npamp-gateway" NO_BUILD=1
mkdir -p "$DIR"
{
  echo "bundle: $PACKED_ON, gateway $GIT_REVISION"
  echo "here: $(uname -srm); nproc $(nproc); $(ldd --version 2>&1 | head -n 1)"
  echo "nginx: $(nginx -v 2>&1 | head -n 1 || true)"
  echo "wrk: $(wrk -v 2>&1 | head -n 1 || true)"
  echo "openssl: $(openssl version 2>&1 || true)"
  # Two busy threads for 1 s under `taskset -c 0`: confined, they get at
  # most one CPU-second between them.
  taskset -c 0 python3 - <<'PY'
import os, threading, time
def spin(until):
    while time.monotonic() < until:
        pass
until = time.monotonic() + 1.0
threads = [threading.Thread(target=spin, args=(until,)) for _ in range(2)]
[t.start() for t in threads]; [t.join() for t in threads]
t = os.times()
cpu = t.user + t.system
print(f"affinity: two spinning threads under taskset -c 0 used {cpu:.2f} CPU-s in 1 s:",
      "confined" if cpu < 1.2 else "NOT confined (the per-core points are not per core)")
PY
} | tee "$DIR/affinity.txt"
OUT=$DIR results/run-per-hop-scaling.sh
tar -czf "$DIR.tar.gz" -C "$(dirname "$DIR")" "$(basename "$DIR")"
echo "packed: $DIR.tar.gz"
