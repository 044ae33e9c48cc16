#!/usr/bin/env python3
"""bench/compare_csv.py - two rlock-bench binaries, alternating rounds.

Reads DIR/a1.csv .. DIR/aN.csv and DIR/b1.csv .. DIR/bN.csv (rlock-bench's
CSV of binary A and B in each round, as bench/run --compare writes them)
and prints, for every figure both measured, A's and B's value per round,
the medians and B's median over A's.

  compare_csv.py DIR ROUNDS NAME_A NAME_B
"""
import csv
import statistics
import sys


def load(path):
    out = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            try:
                v = float(r["value"])
            except ValueError:
                continue
            key = (r["id"], r["metric"].strip(), r["unit"])
            out.setdefault(key, v)
    return out


def fmt(x):
    if x != x:
        return "-"
    return "%.0f" % x if abs(x) >= 100 else "%.3g" % x


def main():
    d, n, a, b = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    ra = [load("%s/a%d.csv" % (d, i)) for i in range(1, n + 1)]
    rb = [load("%s/b%d.csv" % (d, i)) for i in range(1, n + 1)]
    keys = [k for k in ra[0] if all(k in r for r in ra + rb)]
    print()
    print("%s (A) against %s (B), %d alternating rounds on one server"
          % (a, b, n))
    print("%-6s %-44s %-8s %-26s %-26s %-9s %-9s %s" % (
        "id", "figure", "unit", "A per round", "B per round", "median A",
        "median B", "B / A"))
    for k in keys:
        va = [r[k] for r in ra]
        vb = [r[k] for r in rb]
        ma, mb = statistics.median(va), statistics.median(vb)
        print("%-6s %-44s %-8s %-26s %-26s %-9s %-9s %s" % (
            k[0], k[1][:44], k[2], " / ".join(fmt(x) for x in va),
            " / ".join(fmt(x) for x in vb), fmt(ma), fmt(mb),
            "%.2f" % (mb / ma) if ma else "-"))


if __name__ == "__main__":
    main()
