"""Shares of an edge's perf samples (`perf script -F ip,sym` of DWARF call
graphs) in the costs the connection watchdog change is about. A sample
counts in a row when its stack matches, so rows may overlap.
    python3 classify.py EDGE.stacks"""
import re
import sys

stacks = [s for s in open(sys.argv[1]).read().split("\n\n") if s.strip()]


def frames(stack):
    return [m.group(1) for line in stack.splitlines()
            for m in [re.match(r"\s*[0-9a-f]+ (.*)", line)] if m]


ROWS = {
    "hyper's header-read timer (tokio time under Conn::poll_read_head)":
        lambda f: any("poll_read_head" in x for x in f)
        and any("runtime::time" in x or "TokioTimer" in x or "TokioSleep" in x for x in f),
    "the shutdown watch polled (ingress::stopped)":
        lambda f: any("ingress::stopped" in x for x in f),
    "tokio Notify polled (leaf poll_notified, any caller)":
        lambda f: "poll_notified" in f[0],
    "tokio timers (runtime::time in the top 6 frames)":
        lambda f: any("runtime::time" in x for x in f[:6]),
    "the gated watchdog (Gated::poll anywhere)":
        lambda f: any("gated::Gated" in x for x in f),
    "tokio::sync::notify, any function (leaf)":
        lambda f: "tokio::sync::notify" in f[0],
    "... of it under the association's send (assoc::driver::AssocHandle::send)":
        lambda f: "tokio::sync::notify" in f[0] and any("AssocHandle::send" in x or "exec::send" in x for x in f),
    "... of it under the association's writer (assoc::driver::write_loop)":
        lambda f: "tokio::sync::notify" in f[0] and any("driver::write_loop" in x for x in f),
}
total = len(stacks)
print(f"samples: {total}")
for name, match in ROWS.items():
    n = sum(1 for s in stacks if (f := frames(s)) and match(f))
    print(f"{100 * n / total:5.2f} %  {n:5d}  {name}")
