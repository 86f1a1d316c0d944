"""Where a gateway's clock reads come from: `perf script -F ip,sym` of
DWARF call graphs sampled at libc's clock_gettime, grouped by the first
frames that are not the clock itself (std's and tokio's Instant, the
vDSO, closures and inlined async glue).
    python3 callers.py STACKS"""
import collections
import re
import sys

stacks = [s for s in open(sys.argv[1]).read().split("\n\n") if s.strip()]
CLOCK = re.compile(
    r"clock_gettime|std::sys::|std::time::|Instant::now|tokio::time::instant|Timespec"
    r"|Instant>::now|core::ops::function|^now \(inlined\)|^elapsed \(inlined\)"
    r"|^\{async_(fn|block)#\d+\} \(inlined\)$|^<core::pin::Pin<P> as core::future::future::Future>::poll$")
GENERICS = re.compile(r"<[^<>]*(<[^<>]*(<[^<>]*>[^<>]*)*>[^<>]*)*>")


def frames(stack):
    return [m.group(1) for line in stack.splitlines()
            for m in [re.match(r"\s*[0-9a-f]+ (.*)", line)] if m]


where = collections.Counter()
for s in stacks:
    f = [re.sub(r"::h[0-9a-f]{16}$", "", x) for x in frames(s)]
    rest = [GENERICS.sub("<..>", x) for x in f if not CLOCK.search(x)]
    where[" <- ".join(rest[:3])] += 1
print(f"sampled reads: {len(stacks)}")
for k, v in where.most_common(20):
    print(f"{100 * v / len(stacks):5.1f} %  {k[:300]}")
