"""Shares of a gateway's perf samples (`perf script -F ip,sym` of DWARF
call graphs) in the copies this change is about: libc's memcpy/memmove
(a move of a large future is one call), by who called it. A sample counts
in a row when its stack matches, so rows may overlap.
    python3 classify.py GATEWAY.stacks"""
import re
import sys

stacks = [s for s in open(sys.argv[1]).read().split("\n\n") if s.strip()]


def frames(stack):
    return [m.group(1) for line in stack.splitlines()
            for m in [re.match(r"\s*[0-9a-f]+ (.*)", line)] if m]


def copy(f):
    return bool(re.search(r"__mem(cpy|move)", f[0]))


def caller(f, pattern):
    """The first frame outside libc's copy matches."""
    rest = [x for x in f if not re.search(r"__mem(cpy|move)", x)]
    return bool(rest) and re.search(pattern, rest[0]) is not None


ROWS = {
    "memcpy/memmove (libc, leaf)": copy,
    "... called by tokio's spawn or task cell (spawn, Cell::new, set_stage)":
        lambda f: copy(f) and caller(f, r"task::spawn|Cell<T,S>::new|set_stage|bind_new_task|new_task"),
    "... called by the origin's request task (Origin::serve/post/post_to, sink closures)":
        lambda f: copy(f) and caller(f, r"origin::Origin::(serve|post|sink)|origin::\{impl#0\}::(serve|post|sink)"),
    "... called by the executor (gateway::exec)":
        lambda f: copy(f) and caller(f, r"gateway::exec::|exec::\{impl"),
    "... called by hyper or hyper-util":
        lambda f: copy(f) and caller(f, r"hyper"),
    "the executor's own frames (gateway::exec, leaf)":
        lambda f: "gateway::exec" in f[0],
    "tokio task spawn and drop (bind_inner, Cell::new, set_stage, leaf)":
        lambda f: re.search(r"bind_inner|Cell<T,S>::new|set_stage|dealloc", f[0]) is not None,
    "mimalloc (leaf)":
        lambda f: re.search(r"\bmi_|_mi_", f[0]) is not None,
}
total = len(stacks)
print(f"samples: {total}")
for name, match in ROWS.items():
    n = sum(1 for s in stacks if (f := frames(s)) and match(f))
    print(f"{100 * n / total:5.2f} %  {n:5d}  {name}")
