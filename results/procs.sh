# Shared by the result scripts that start processes (sourced from the
# repository root, after TMP is set): `start`, and in `pids` every process
# it began, for the caller's cleanup to kill.
pids=()

# start NAME READY COMMAND...: runs COMMAND in the background (stdout in
# $TMP/NAME.out, stderr in $TMP/NAME.err, its pid in ${NAME}_pid with `-`
# read as `_`) and waits, 10 s at most, for a stdout line matching the
# regex READY.
start() {
  local name=$1 ready=$2; shift 2
  "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" &
  pids+=($!)
  printf -v "${name//-/_}_pid" %s $!
  for _ in $(seq 200); do
    grep -qsE "$ready" "$TMP/$name.out" && return 0
    sleep 0.05
  done
  echo "$name did not start:"; cat "$TMP/$name.err"; exit 1
}
