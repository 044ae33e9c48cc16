#!/usr/bin/env python3
"""bench/syscalls.py - system calls per lock operation of rlock-bench's S4 or
S2 client, by kind, from `perf trace` (needs perf and the rights to trace).

A count, not a time: on a shared VM whose load moves rlock-bench's rates
by 2-5x between rounds of the same binary, the calls each acquisition
costs the client (its loop thread's epoll_wait, the eventfd wake-ups
between the callers and the loop, the socket's writes and reads, the
futex sleeps and wake-ups) move little, so two binaries compare here when
their times cannot.

    bench/syscalls.py BIN [--port P] [--only S4|S2] [--rounds N]

BIN is an rlock-bench binary (bench/run builds build-bench/bench/rlock-bench;
bench/compare keeps the other commit's under build-compare/). It runs
`BIN --only S4` (or S2 at 32 threads) against the server on --port (default
6379) with BENCH_SECONDS=1 under perf trace, N times (default 2), and
prints one line per run. Only the first client's threads count (the one S4
or S2 runs on, up to the moment the next client's loop thread starts);
the benchmark's own synchronous hiredis connection (its wire-floor row) is
left out: its fd is the one no loop thread uses.
"""
import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile


def one_run(binary, port, only):
    env = dict(os.environ, BENCH_SECONDS="1", BENCH_S2_THREADS="32")
    with tempfile.TemporaryDirectory() as d:
        trace = os.path.join(d, "trace")
        out = subprocess.run(
            ["perf", "trace", "-e", "read,write,epoll_wait,futex,getpid",
             "-o", trace, "--", binary, "--port", str(port), "--only", only,
             "--csv", os.path.join(d, "csv")],
            env=env, capture_output=True, text=True)
        text = out.stdout + out.stderr
        if only == "S4":
            m = re.search(r"^S4: (\d+) acquisitions", text, re.M)
            ops = float(m.group(1)) if m else 0.0
        else:
            m = re.search(r"^S2: 32 threads: (\d+) pairs/s", text, re.M)
            ops = float(m.group(1)) if m else 0.0  # BENCH_SECONDS=1
        if ops <= 0:
            sys.exit(f"no {only} result from {binary}:\n{text[-2000:]}")
        with open(trace, errors="replace") as f:
            lines = f.read().splitlines()
    counts = collections.Counter()
    loops = []
    for line in lines:
        m = re.search(r"/(\d+) (\w+)\((?:fd: (\d+))?", line)
        if not m:
            continue
        tid, call, fd = m.group(1), m.group(2), m.group(3) or ""
        if call == "epoll_wait" and tid not in loops:
            loops.append(tid)
        if len(loops) >= 2:
            break  # the next client (S2off, S4h0) began
        who = "loop" if loops and tid == loops[0] else "app"
        counts[(who, call, fd)] += 1
    loop_w = collections.Counter({k[2]: v for k, v in counts.items()
                                  if k[:2] == ("loop", "write")})
    app_w = {k[2] for k in counts if k[:2] == ("app", "write")}
    sock = loop_w.most_common(1)[0][0] if loop_w else None
    evfd = next((f for f in app_w
                 if f != sock and ("loop", "read", f) in counts), None)

    def per(who, call, fd=""):
        return counts.get((who, call, fd), 0) / ops

    row = collections.OrderedDict(
        epoll_wait=per("loop", "epoll_wait"),
        eventfd_write=per("app", "write", evfd) + per("loop", "write", evfd),
        eventfd_read=per("loop", "read", evfd),
        socket_write=per("loop", "write", sock),
        socket_read=per("loop", "read", sock),
        futex=per("app", "futex") + per("loop", "futex"),
        getpid=per("app", "getpid") + per("loop", "getpid"))
    return ops, row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("binary")
    ap.add_argument("--port", type=int, default=6379)
    ap.add_argument("--only", choices=["S4", "S2"], default="S4")
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    unit = "acquisition" if a.only == "S4" else "pair"
    print(f"{a.binary}: {a.only}, system calls of its client per {unit}")
    for _ in range(a.rounds):
        ops, row = one_run(a.binary, a.port, a.only)
        print(f"  {ops:8.0f} {unit}s  " +
              "  ".join(f"{k} {v:.2f}" for k, v in row.items()) +
              f"  total {sum(row.values()):.2f}")


if __name__ == "__main__":
    main()
