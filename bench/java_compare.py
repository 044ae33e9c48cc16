#!/usr/bin/env python3
"""bench/java_compare.py - rlock beside Java Redisson, from one bench/run.

Reads the rounds bench/run --java wrote to DIR: rlock-bench's CSV (rN.csv)
and the Redisson benchmark's output (jN.out) of each round, and prints for
S1-S4 and memory rlock, Java and their ratio per round, then the medians,
with issue 39's targets (all in the same run, same server):
S4 >= 3x Java, S2 >= 2.5x Java at 8 and 32 threads, S3 handoff p50 <= 0.2x
Java's, S1 p50 <= 1.1 x two serial round trips (the wire's floor).
Beside them, rlock's S4 wire floor per round (its transfer replayed
serially on one synchronous connection, no client threads) and the
herd's share of it: when S4 moves and its share does not, the machine
moved, not the library.

  java_compare.py DIR ROUNDS
"""
import csv
import re
import statistics
import sys


def rlock_rows(path):
    got = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if r.get("transport", "tcp") != "tcp":
                continue
            got[(r["id"], r["metric"].strip())] = r
    return got


def num(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return float("nan")


S4_FLOOR = "wire floor: its transfer, serially, sync hiredis"


def rlock_figures(path):
    rows = rlock_rows(path)

    def v(i, m):
        r = rows.get((i, m))
        return num(r["value"]) if r else float("nan")

    def ratio(i, m):
        r = rows.get((i, m))
        return num(r["ratio"]) if r else float("nan")

    return {
        "S1 pairs/s": v("S1", "uncontended lock+unlock, 1 thread"),
        "S1 p50 us": v("S1", "pair time p50"),
        "S1 p50 / 2 serial p50": ratio("S1", "pair time p50"),
        "S2 8 threads pairs/s": v("S2", "distinct locks, 8 threads"),
        "S2 32 threads pairs/s": v("S2", "distinct locks, 32 threads"),
        # from the holder's unlock call, as JavaBench times it (t0 before
        # lock.unlock()); rlock-bench's "handoff latency" starts when the
        # unlock returned, which a transfer's reply ends with the waiter's
        "S3 handoff p50 us": v("S3", "handoff from the unlock call p50"),
        "S3 acq/s": v("S3", "handoff ping-pong, 2 threads"),
        "S4 acq/s": v("S4", "herd, 64 threads on one lock"),
        "S4 cmds/acq": v("S4", "client-sent commands per acquisition"),
        "S4 wire floor acq/s": v("S4", S4_FLOOR),
        # the row's ratio: the herd's acq/s over the floor's
        "S4 / its wire floor": ratio("S4", S4_FLOOR),
        "memory peak KiB": v("MEM", "client RSS, peak under S2 (up to 64 "
                             "threads)"),
    }


def java_figures(path):
    text = open(path, errors="replace").read()
    nan = float("nan")
    f = dict.fromkeys(["S1 pairs/s", "S1 p50 us", "S2 8 threads pairs/s",
                       "S2 32 threads pairs/s", "S3 handoff p50 us",
                       "S3 acq/s", "S4 acq/s", "S4 cmds/acq",
                       "memory peak KiB"], nan)
    m = re.search(r"^S1 .*pairs/s=([\d.]+) p50=([\d.]+)us", text, re.M)
    if m:
        f["S1 pairs/s"], f["S1 p50 us"] = float(m[1]), float(m[2])
    for m in re.finditer(r"^S2 threads=(\d+) .*total pairs/s=([\d.]+)",
                         text, re.M):
        f["S2 %s threads pairs/s" % m[1]] = float(m[2])
    m = re.search(r"^S3 .*hold-after-waiter-entered=0: .*p50=([\d.]+)us "
                  r".*acquisitions/s=([\d.]+)", text, re.M)
    if m:
        f["S3 handoff p50 us"], f["S3 acq/s"] = float(m[1]), float(m[2])
    m = re.search(r"^S4 .*acquisitions/s=([\d.]+).*client-issued\([^)]*\)="
                  r"([\d.]+)", text, re.M)
    if m:
        f["S4 acq/s"], f["S4 cmds/acq"] = float(m[1]), float(m[2])
    m = re.search(r"VmHWM=.*\((\d+) kB\)", text)
    if m:
        f["memory peak KiB"] = float(m[1])
    return f


# figure, whether higher is better for rlock (the ratio is rlock / Java),
# and issue 39's target on the ratio
FIGURES = [
    ("S1 pairs/s", None),
    ("S1 p50 us", None),
    ("S2 8 threads pairs/s", (">=", 2.5)),
    ("S2 32 threads pairs/s", (">=", 2.5)),
    ("S3 handoff p50 us", ("<=", 0.2)),
    ("S3 acq/s", None),
    ("S4 acq/s", (">=", 3.0)),
    ("S4 cmds/acq", None),
    ("memory peak KiB", None),
]
# rlock's own rows, per round: figure and target on the figure itself
RLOCK_ONLY = [
    ("S1 p50 / 2 serial p50", ("<=", 1.1)),
    ("S4 wire floor acq/s", None),
    ("S4 / its wire floor", None),
]


def judge(med, target):
    """The target column for a median, and whether it missed."""
    if target is None or med != med:
        return "", False
    good = med >= target[1] if target[0] == ">=" else med <= target[1]
    return "%s %.2f %s" % (target[0], target[1], "pass" if good else "MISS"), \
        not good


def read_steal(path):
    """The steal % bench/run wrote for one round (nan if none)."""
    try:
        with open(path) as f:
            return float(f.read().strip())
    except (OSError, ValueError):
        return float("nan")


def fmt(x):
    if x != x:
        return "-"
    if abs(x) >= 100:
        return "%.0f" % x
    return "%.2f" % x


def main():
    d, rounds = sys.argv[1], int(sys.argv[2])
    rl = [rlock_figures("%s/r%d.csv" % (d, i)) for i in range(1, rounds + 1)]
    jv = [java_figures("%s/j%d.out" % (d, i)) for i in range(1, rounds + 1)]
    print()
    print("rlock beside Java Redisson 4.7 (same server, alternating rounds;"
          " ratio = rlock / Java)")
    print("%-24s %s %-26s %s" % ("figure", "  ".join(
        "round %d: rlock, Java (ratio)" % (i + 1) for i in range(rounds)),
        "median ratio", "target"))
    failed = 0
    for name, target in FIGURES:
        cells, ratios = [], []
        for a, b in zip(rl, jv):
            r = a[name] / b[name] if b[name] == b[name] and b[name] else \
                float("nan")
            ratios.append(r)
            cells.append("%s, %s (%s)" % (fmt(a[name]), fmt(b[name]),
                                          fmt(r)))
        ok = [x for x in ratios if x == x]
        med = statistics.median(ok) if ok else float("nan")
        verdict, missed = judge(med, target)
        failed += missed
        print("%-24s %s   %-12s %s" % (name, "   ".join(cells), fmt(med),
                                        verdict))
    for name, target in RLOCK_ONLY:
        xs = [a[name] for a in rl]
        ok = [x for x in xs if x == x]
        if ok:
            med = statistics.median(ok)
            verdict, missed = judge(med, target)
            failed += missed
            print("%-24s %s   %-12s %s" % (name, "   ".join(fmt(x) for x in xs),
                                            fmt(med), verdict))
    steal = [(read_steal("%s/r%d.steal" % (d, i)),
              read_steal("%s/j%d.steal" % (d, i))) for i in range(1, rounds + 1)]
    if any(x == x for pair in steal for x in pair):
        print("%-24s %s" % ("host steal %", "   ".join(
            "%s, %s" % (fmt(a), fmt(b)) for a, b in steal)))
        worst = max((x for pair in steal for x in pair if x == x), default=0)
        if worst > 5:
            print("  (steal: CPU time the hypervisor gave other guests; a round "
                  "with %.0f%% of it times the host more than the code)" % worst)
    print("%d target(s) missed (medians)" % failed)


if __name__ == "__main__":
    main()
