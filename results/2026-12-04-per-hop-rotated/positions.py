"""Rate of each path by its place in the order of its round (run-per-hop.sh
rotates the order by one path a round), as a share of that path's mean at
that point, over every point: does running later at a point help?

    positions.py cores-N/points.tsv..."""
import sys, collections, statistics
P = ["direct", "gateway-quic", "gateway-tls", "nginx-tls"]
for f in sys.argv[1:]:
    rates = collections.defaultdict(dict)
    for line in open(f):
        x = line.rstrip("\n").split("\t")
        rnd, c, path = int(x[0]), int(x[1]), x[2]
        kv = dict(y.split("=", 1) for y in x[3:])
        rates[(c, path)][rnd] = int(kv["reqs"])
    print(f)
    bypos = collections.defaultdict(list)
    for (c, path), d in rates.items():
        m = statistics.mean(d.values())
        for rnd, n in d.items():
            pos = (P.index(path) - (rnd - 1)) % 4
            bypos[pos].append(n / m)
    for pos in sorted(bypos):
        print(f"  position {pos + 1}: rate / the path's mean at that point, median {statistics.median(bypos[pos]):.3f}, mean {statistics.mean(bypos[pos]):.3f} (n={len(bypos[pos])})")
