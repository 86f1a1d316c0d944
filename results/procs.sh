# Shared by the result scripts that start processes (sourced from the
# repository root, after TMP is set): `start`, and in `pids` every process
# it began, for the caller's cleanup to kill.
pids=()

# What the processes of a run spent, read before and after a point:
# ticks PID...: their CPU time in clock ticks (utime + stime, /proc/PID/stat);
# switches PID...: the context switches of every thread of theirs, voluntary
# and involuntary; preempted PID...: of those, the involuntary ones (a thread
# preempted while it could still run, most often by the task its own write
# woke); udp_in: the UDP datagrams the machine has received (/proc/net/snmp).
ticks() { local t=0 p; for p in "$@"; do t=$((t + $(awk '{ print $14 + $15 }' "/proc/$p/stat"))); done; echo $t; }
switches() { local p; for p in "$@"; do cat /proc/"$p"/task/*/status 2>/dev/null; done | awk '/ctxt_switches/ { n += $2 } END { print n + 0 }'; }
preempted() { local p; for p in "$@"; do cat /proc/"$p"/task/*/status 2>/dev/null; done | awk '/^nonvoluntary_ctxt_switches/ { n += $2 } END { print n + 0 }'; }
udp_in() { awk '/^Udp:/ && $2 ~ /^[0-9]/ { print $2 }' /proc/net/snmp; }

# start NAME READY COMMAND...: runs COMMAND in the background (stdout in
# $TMP/NAME.out, stderr in $TMP/NAME.err, its pid in ${NAME}_pid with `-`
# read as `_`) and waits, 10 s at most, for a stdout line matching the
# regex READY.
#
# COMMAND runs in a session of its own (`setsid`), as a server started by a
# service manager or a daemon (nginx's master calls setsid) does. With the
# kernel's autogroup on (kernel.sched_autogroup_enabled, the default of most
# distributions), the scheduler shares the CPU out among sessions first: a
# server left in the script's session competes as one group with the load
# generator, while each nginx has a group of its own, and on one vCPU the
# origin was preempted 0.74 times per request against nginx's 0.16
# (results/2026-12-05-sessions/). START_SESSION=shared keeps the old
# behaviour, to reproduce a run made before. setsid forks (and $! would not
# be COMMAND's pid) only when called by a process group leader, which a
# background job of a script without job control never is.
START_SESSION=${START_SESSION:-own}
case $START_SESSION in own|shared) ;; *) echo "START_SESSION is own or shared, not $START_SESSION"; exit 2;; esac
start() {
  local name=$1 ready=$2 pid; shift 2
  [ "$START_SESSION" = own ] && set -- setsid "$@"
  "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" &
  pid=$!
  pids+=("$pid")
  printf -v "${name//-/_}_pid" %s "$pid"
  for _ in $(seq 200); do
    if grep -qsE "$ready" "$TMP/$name.out"; then
      # Had setsid forked, $pid would be setsid's, gone, and the server
      # neither measured nor killed at the end.
      if [ "$START_SESSION" = own ] && [ "$(ps -o sid= -p "$pid" | tr -d ' ')" != "$pid" ]; then
        echo "$name is not the leader of a session of its own as pid $pid (job control on?); try START_SESSION=shared"
        exit 1
      fi
      return 0
    fi
    sleep 0.05
  done
  echo "$name did not start:"; cat "$TMP/$name.err"; exit 1
}
