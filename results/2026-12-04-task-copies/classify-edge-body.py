"""Shares of an edge's perf samples (`perf script -F ip,sym` of DWARF call
graphs) in what the HTTP answer's body timer and Content-Type check cost.
A sample counts in a row when its stack matches, so rows may overlap.
    python3 classify-edge-body.py EDGE.stacks"""
import re
import sys

stacks = [s for s in open(sys.argv[1]).read().split("\n\n") if s.strip()]


def frames(stack):
    return [m.group(1) for line in stack.splitlines()
            for m in [re.match(r"\s*[0-9a-f]+ (.*)", line)] if m]


def clock(f):
    return re.search(r"clock_gettime|Timespec>::now", f[0]) is not None


def under_answer(f):
    return any("ingress::http::answer" in x for x in f)


ROWS = {
    "a timer made for the body (tokio timeout/Sleep/TimerEntry in the top 8 frames, under answer)":
        lambda f: under_answer(f) and any(
            re.search(r"timeout::timeout|Sleep>::new|sleep::Sleep::new|TimerEntry|new_timeout|far_future", x)
            for x in f[:8]),
    "the Content-Type lowercased (to_ascii_lowercase anywhere)":
        lambda f: any("to_ascii_lowercase" in x for x in f),
    "clock reads (leaf)": clock,
    "... under answer": lambda f: clock(f) and under_answer(f),
    "answer, anywhere in the stack": under_answer,
}
total = len(stacks)
print(f"samples: {total}")
for name, match in ROWS.items():
    n = sum(1 for s in stacks if (f := frames(s)) and match(f))
    print(f"{100 * n / total:5.2f} %  {n:5d}  {name}")
