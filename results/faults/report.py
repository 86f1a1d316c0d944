#!/usr/bin/env python3
"""The table of a fault-injection run (results/faults/run-faults.sh).

    python3 results/faults/report.py OUT RSS_LIMIT_MB

Per scenario, from OUT/<scenario>/: summary.json (the load generator's
accounting), faults.txt (fault start and end, seconds after the load
started), rss.txt (gateway RSS samples, kB), slow-*.txt (slow clients).
Checks: every request answered exactly once (replied + transport errors +
timed out = sent; lost, duplicated, late, mismatched = 0), no success that
is not the request's own echo (wrong_result = 0), errors only of the
documented kinds (HTTP 502/503/504 with -32004/-32011/-32010, and 502
with -32014 MayHaveExecuted: a request that the association lost after it
was sent, which is not sent again; docs/gateway.md), RSS under
the limit; slow-clients also: no error at all for the steady load and every
slow client cut off. Writes OUT/README.md; exit 1 if a check failed.
"""
import json
import os
import sys

DOCUMENTED = {
    "-32004": "NotDelivered (502)",
    "-32011": "Unavailable (503)",
    "-32010": "Timeout (504)",
    "-32014": "MayHaveExecuted (502)",
}


def read_faults(path):
    marks = {}
    for line in open(path):
        k, _, v = line.strip().partition(" ")
        if v:
            marks[k] = float(v)
    return marks


def recovery(per_second, fault_start, fault_end):
    """Seconds from the fault's end to the first of three whole seconds in a
    row without an error and with at least half the replies per second seen
    before the fault (1 s resolution), and the errors in later seconds."""
    before = [r for r, _ in per_second[1 : max(2, int(fault_start))]]
    normal = sum(before) / len(before)
    healthy = [r >= normal / 2 and e == 0 for r, e in per_second]
    # The last second of the run is partial: it counts as healthy.
    healthy[-1] = healthy[-1] or per_second[-1][1] == 0
    for i in range(int(fault_end), len(per_second)):
        if all(healthy[i : i + 3]):
            later = sum(e for _, e in per_second[i:])
            return max(0.0, i - fault_end), later
    return None, 0


def main():
    out, limit_mb = sys.argv[1], float(sys.argv[2])
    rows, failed = [], []
    for name in ["upstream-kill", "peer-restart", "peer-kill", "lossy-path", "overload", "slow-clients"]:
        d = os.path.join(out, name)
        if not os.path.isdir(d):
            continue  # not run (ONLY=...)
        if not os.path.isfile(os.path.join(d, "summary.json")):
            failed.append(f"{name}: no summary.json")
            continue
        s = json.load(open(os.path.join(d, "summary.json")))
        a = s["accounting"]
        marks = read_faults(os.path.join(d, "faults.txt"))
        rss = {"edge": 0, "origin": 0}
        for line in open(os.path.join(d, "rss.txt")):
            n, kb = line.split()
            rss[n] = max(rss[n], int(kb))
        problems = []
        answered = a["replied"] + sum(a["transport_errors"].values()) + a["timed_out"]
        if answered != a["sent_requests"]:
            problems.append(f"answered {answered} of {a['sent_requests']}")
        for k in ["lost", "duplicated", "late", "mismatched", "wrong_result"]:
            if a.get(k, 0):
                problems.append(f"{k} {a[k]}")
        undocumented = {c: n for c, n in a["error_codes"].items() if c not in DOCUMENTED}
        if undocumented:
            problems.append(f"undocumented errors {undocumented}")
        if a["transport_errors"]:
            problems.append(f"transport errors {a['transport_errors']}")
        for n, kb in rss.items():
            if kb / 1024 > limit_mb:
                problems.append(f"{n} RSS {kb / 1024:.0f} MiB")
        slow = ""
        if name == "slow-clients":
            errors = a["unexpected_errors"] + a["timed_out"]
            if errors:
                problems.append(f"{errors} errors for the steady load")
            parts = []
            for kind in ["headers", "body", "ws"]:
                text = open(os.path.join(d, f"slow-{kind}.txt")).read().split()
                v = dict(zip(text[::2], text[1::2]))
                parts.append(f"{kind}: {v.get('cut_off')}/{v.get('opened')} cut off, max {v.get('cut_off_max_ms')} ms")
                if v.get("cut_off") != v.get("opened") or v.get("opened") in (None, "0"):
                    problems.append(f"slow {kind} clients not all cut off: {v}")
            slow = "; ".join(parts)
        errors = ", ".join(f"{DOCUMENTED.get(c, c)} {n}" for c, n in sorted(a["error_codes"].items())) or "none"
        if name == "overload" and "overload_rate" in marks:
            cap, rate = marks["capacity"], marks["overload_rate"]
            slow = (
                f"offered {rate:.0f} req/s = {rate / cap:.2f}x the capacity for 30 s "
                f"(the load generator could send {marks['generator']:.0f} req/s here)"
            )
            if not s.get("generator_kept_schedule", True):
                lag = s["schedule_lag_ms"]
                behind = lag["max"]
                behind = f"{behind:.0f} ms" if behind < 1000 else f"{behind / 1000:.1f} s"
                slow += f"; the load generator fell behind its schedule by up to {behind}"
            if rate < 1.25 * cap:
                problems.append(
                    f"not an overload: the load generator can offer only {rate / cap:.2f}x the capacity here"
                )
        rec, later = (None, 0)
        inconclusive = ""
        if name != "lossy-path":
            rec, later = recovery(s["per_second"], marks["fault_start"], marks["fault_end"])
            if rec is None and not s.get("generator_kept_schedule", True):
                # The generator still sends its backlog after the fault, so
                # the gateway is still shedding it: recovery cannot be seen.
                lag = s["schedule_lag_ms"]
                inconclusive = (
                    "recovery not judged: the load generator could not keep its schedule "
                    f"(lag p99 {lag['p99'] / 1000:.1f} s, max {lag['max'] / 1000:.1f} s) and was "
                    "still sending its backlog when the run ended"
                )
            elif rec is None:
                problems.append("never recovered")
        rows.append(
            {
                "name": name,
                "sent": a["sent_requests"],
                "ok": a["ok"],
                "errors": errors,
                "timed_out": a["timed_out"],
                "lost": a["lost"],
                "dup": a["duplicated"],
                "wrong": a.get("wrong_result", 0),
                "recovery": "—" if rec is None else f"{rec:.1f} s" + (f" ({later} errors later)" if later else ""),
                "p99": s["latency_ms"]["p99"],
                "rss": f"{rss['edge'] / 1024:.0f} / {rss['origin'] / 1024:.0f}",
                "pass": "NO" if problems else ("inconclusive" if inconclusive else "yes"),
                "notes": "; ".join(p for p in [*problems, inconclusive, slow] if p),
                "marks": marks,
            }
        )
        if problems:
            failed.append(f"{name}: {'; '.join(problems)}")
    machine = open(os.path.join(out, "machine.txt")).read()
    lines = [
        "# Fault injection with exact accounting",
        "",
        "```",
        machine.strip(),
        "```",
        "",
        f"RSS limit: {limit_mb:.0f} MiB per gateway. Recovery: from the fault's end to the first",
        "of three whole seconds in a row with no failed request and at least half the replies per",
        "second seen before the fault (the load generator counts per second, so ±1 s), and the",
        "errors seen after that, if any. p99 is measured from each request's",
        "intended send time, so it includes any time the generator could not send.",
        "Where the generator fell behind its schedule and never caught up, recovery is",
        "not judged (inconclusive): the gateway was still being sent the backlog.",
        "",
        "| scenario | sent | ok | errors (documented) | timed out | lost | duplicated | wrong result | recovery | p99 ms | peak RSS MiB edge / origin | pass |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['name']} | {r['sent']} | {r['ok']} | {r['errors']} | {r['timed_out']} | {r['lost']} | {r['dup']} | {r['wrong']} | {r['recovery']} | {r['p99']:.1f} | {r['rss']} | {r['pass']} |"
        )
    lines.append("")
    for r in rows:
        m = ", ".join(
            f"{k} {v:.1f} s" if k.startswith("fault_") else f"{k} {v:.0f}"
            for k, v in r["marks"].items()
        )
        lines.append(f"- **{r['name']}**: {m}. {r['notes']}".rstrip())
    if failed:
        lines += ["", "## Failed", ""] + [f"- {f}" for f in failed]
    open(os.path.join(out, "README.md"), "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
