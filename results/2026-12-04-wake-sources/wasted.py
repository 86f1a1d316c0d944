"""Wakes of one worker thread of a gateway by another, per request, by
source; and of those, the ones after which the woken thread went back to
sleep having woken nobody (no datagram sent, no reply written, no other
task handed on): a wake that did no work.

    wasted.py SCRIPT TIDS REQUESTS

SCRIPT is `perf script -F tid,time,event,trace,ip,sym` of sched:sched_waking
and sched:sched_switch recorded with call graphs on the gateway's pid; TIDS
lists its thread ids, one a line; REQUESTS is how many requests the run
made."""
import collections
import re
import sys

script, tids_file, requests = sys.argv[1], sys.argv[2], int(sys.argv[3])
tids = {line.split()[0] for line in open(tids_file) if line.strip()}

events = []
for line in open(script):
    if line.strip() and not line.startswith("\t"):
        m = re.match(r"\s*(\d+)\s+([\d.]+):\s+(\S+):\s*(.*)", line)
        if m:
            events.append([m.group(1), m.group(3), m.group(4), []])
    elif line.strip() and events:
        parts = line.strip().split(None, 1)
        if len(parts) == 2:
            events[-1][3].append(parts[1])

# The frame that names how tokio scheduled the woken task.
SOURCES = (
    ("Context::run_task", "a worker that was searching found work"),
    ("Context::park_internal", "a worker woke from its park with work for two"),
    ("Handle>>::yield_now", "a task was woken while it ran (re-queued behind the others)"),
    ("bind_new_task", "spawn"),
    ("Unparker::unpark", "the worker holding the I/O driver was woken (eventfd)"),
    ("Handle>>::schedule", "a task woke another, which went to the run queue"),
)


def source(stack):
    for frame in stack:
        for key, name in SOURCES:
            if key in frame:
                if key == "Handle>>::schedule":
                    by = [f for f in stack if "::" in f and not f.startswith(
                        ("tokio::runtime", "tokio::sync", "core::", "alloc::", "<alloc"))]
                    return f"{name}, from {(by[0] if by else '?')[:80]}"
                return name
    return "other"


woken_by = collections.Counter()
wasted = collections.Counter()
waiting = {}  # woken thread -> [source, did it wake anything since]
for tid, event, trace, stack in events:
    if event == "sched:sched_waking":
        wakee = re.search(r"pid=(\d+)", trace).group(1)
        if tid in waiting:
            waiting[tid][1] = True
        if wakee in tids and wakee != tid:
            s = source(stack)
            woken_by[s] += 1
            waiting[wakee] = [s, False]
    elif event == "sched:sched_switch" and "prev_state=S" in trace and tid in waiting:
        s, worked = waiting.pop(tid)
        if not worked:
            wasted[s] += 1

n = max(requests, 1)
print(f"requests {requests}; wakes of one worker by another: {sum(woken_by.values()) / n:.2f} per request")
print("per request: woken | of them slept again having woken nobody | how")
for s, count in woken_by.most_common():
    print(f"  {count / n:5.2f} | {wasted[s] / n:5.2f} | {s}")
