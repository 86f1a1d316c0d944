"""Shares of an origin's perf samples (`perf script -F ip,sym` of DWARF
call graphs) in the connection extra that hyper-util's pool copies into
every response: inserting it into the response's extensions, and dropping
them. A sample counts in a row when its stack matches, so rows may overlap.
    python3 classify-origin-extras.py ORIGIN.stacks"""
import re
import sys

stacks = [s for s in open(sys.argv[1]).read().split("\n\n") if s.strip()]


def frames(stack):
    return [m.group(1) for line in stack.splitlines()
            for m in [re.match(r"\s*[0-9a-f]+ (.*)", line)] if m]


ROWS = {
    "the response's extensions (http::extensions, ExtraEnvelope, HttpInfo, anywhere)":
        lambda f: any(re.search(r"http::extensions|ExtraEnvelope|ExtraInner|HttpInfo", x) for x in f),
    "mimalloc (leaf)": lambda f: re.search(r"\bmi_|_mi_", f[0]) is not None,
}
total = len(stacks)
print(f"samples: {total}")
for name, match in ROWS.items():
    n = sum(1 for s in stacks if (f := frames(s)) and match(f))
    print(f"{100 * n / total:5.2f} %  {n:5d}  {name}")
