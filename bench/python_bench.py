#!/usr/bin/env python3
"""The Python binding against redis-py's Lock, side by side in one run
(issue 36), on one private redis-server:

Single runs move by 2x on a loaded machine: P2 and P4 run three times,
P1 seven (--p1-rounds), alternating rlock and redis-py (and, for P1, the
C benchmark), and the medians count.

  P1  single-thread lock+unlock: pair time p50 (both two round trips);
      beside it the C benchmark's S1 p50 on the same server (rlock-bench
      --only S1), so the binding's own cost shows
  P2  8 threads on distinct locks: pairs/s
  P3  two-thread handoff: time from the holder's release to the waiter
      having the lock, p50 (redis-py's waiter polls: sleep=0.1 by default)
  P4  16 threads on one lock: acquisitions/s
  RSS (--rss N): N lock/unlock pairs on one thread, the process's RSS
      before and after

Both sides take a fixed 30-s lease, as rlock-bench's S1-S4 do: redis-py's
Lock(timeout=30) and rlock's lease=30.0 (--lease 0: rlock's watchdog,
which renews on the loop thread and costs a timer per hold).

Run it with the Python that has the package and redis-py, e.g. from a
build dir configured with -Dpython=enabled (Debian's python3-redis):

  PYTHONPATH=build/python /usr/bin/python3 bench/python_bench.py \\
      --c-bench build/bench/rlock-bench

Figures go to docs/performance.md ("Python"). Targets (issue 36): P3 at
least 10x faster than redis-py's, P2 and P4 at least 2x its throughput, P1
no slower than redis-py's and within 1.3x of the C benchmark's S1 p50.
"""
import argparse
import csv
import functools
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import redis

import rlock


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server():
    d = tempfile.mkdtemp(prefix="rlock-pybench-")
    port = free_port()
    p = subprocess.Popen([os.environ.get("REDIS_SERVER", "redis-server"),
                          "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                          "--appendonly", "no", "--dir", d],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    r = redis.Redis(port=port)
    for _ in range(500):
        try:
            r.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.01)
    return p, port, d


# ---- the two contenders, one interface --------------------------------------

class RlockSide:
    name = "rlock"

    def __init__(self, port, lease):
        self.c = rlock.Client(f"redis://127.0.0.1:{port}")
        self.lease = lease

    def lock(self, key):
        lk = self.c.lock(key)
        if self.lease is None:
            return lk.acquire, lk.release
        return functools.partial(lk.acquire, lease=self.lease), lk.release

    def close(self):
        self.c.close()


class RedisPySide:
    name = "redis-py"

    def __init__(self, port):
        self.r = redis.Redis(port=port)

    def lock(self, key):
        lk = self.r.lock(key, timeout=30)  # defaults otherwise: sleep=0.1
        return lk.acquire, lk.release

    def close(self):
        self.r.close()


# ---- scenarios ---------------------------------------------------------------

def p1_single(side, seconds):
    acq, rel = side.lock("pb:p1:" + side.name)
    times = []
    end = time.perf_counter() + seconds
    pc = time.perf_counter_ns
    while time.perf_counter() < end:
        t0 = pc()
        acq()
        rel()
        times.append(pc() - t0)
    return statistics.median(times) / 1000.0, len(times) / seconds


def p2_distinct(side, seconds, threads=8):
    counts = [0] * threads
    stop = threading.Event()

    def worker(i):
        acq, rel = side.lock(f"pb:p2:{side.name}:{i}")
        n = 0
        while not stop.is_set():
            acq()
            rel()
            n += 1
        counts[i] = n
    ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in ts:
        t.join()
    return sum(counts) / seconds


def p3_handoff(side, rounds):
    key = "pb:p3:" + side.name
    acq_a, rel_a = side.lock(key)
    acq_b, rel_b = side.lock(key)
    lat = []
    for _ in range(rounds):
        acq_a()
        got = []
        started = threading.Event()

        def b():
            started.set()
            acq_b()
            got.append(time.perf_counter())
            rel_b()
        t = threading.Thread(target=b)
        t.start()
        started.wait()
        time.sleep(0.02)  # B is waiting
        t0 = time.perf_counter()
        rel_a()
        t.join()
        lat.append(got[0] - t0)
    return statistics.median(lat) * 1e6


def p4_one_lock(side, seconds, threads=16):
    counts = [0] * threads
    stop = threading.Event()
    key = "pb:p4:" + side.name
    inside = [0]
    broken = []

    def worker(i):
        acq, rel = side.lock(key)
        n = 0
        while not stop.is_set():
            acq()
            inside[0] += 1
            if inside[0] != 1:
                broken.append(1)
            inside[0] -= 1
            rel()
            n += 1
        counts[i] = n
    ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in ts:
        t.join()
    assert not broken, "mutual exclusion broken"
    return sum(counts) / seconds


def c_s1_p50(bench_bin, port, seconds):
    """The C benchmark's S1 pair p50 (us) on the same server."""
    with tempfile.NamedTemporaryFile(suffix=".csv") as f:
        subprocess.run([bench_bin, "--port", str(port), "--seconds", str(seconds),
                        "--only", "S1", "--csv", f.name], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(f.name) as fh:
            for row in csv.DictReader(fh):
                if row["id"] == "S1" and row["metric"].strip() == "pair time p50":
                    return float(row["value"])
    return float("nan")


def cpu_ticks():
    """(steal, total) clock ticks of all CPUs from /proc/stat: steal is
    time the hypervisor gave this VM's CPUs to other guests. On a shared VM
    it rises with our own load, and a run with much of it measures the
    host, not the code."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
        return v[7], sum(v)
    except (OSError, ValueError, IndexError):
        return 0, 0


class Steal:
    """Steal percentages per scenario, one per timed sub-run."""

    def __init__(self):
        self.by = {}

    def run(self, scenario, fn, *args):
        s0, t0 = cpu_ticks()
        r = fn(*args)
        s1, t1 = cpu_ticks()
        self.by.setdefault(scenario, []).append(
            100.0 * (s1 - s0) / (t1 - t0) if t1 > t0 else float("nan"))
        return r

    def report(self):
        """One line per scenario and side: the steal % of each sub-run, in
        the order of the runs printed above."""
        print("host steal % per sub-run (CPU time the hypervisor gave other guests):")
        for k, v in self.by.items():
            print(f"  {k}: " + ", ".join(f"{x:.0f}" for x in v))
        worst = max((max(v) for v in self.by.values() if v), default=0.0)
        if worst > 5:
            print(f"  steal reached {worst:.0f}% in a sub-run: such a run times the "
                  "host more than the code; run again on a quieter machine")


def rss_kb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, help="use this server instead of a private one")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--c-bench", help="rlock-bench binary (P1's C reference)")
    ap.add_argument("--rss", type=int, default=0, help="pairs for the RSS run (0: none)")
    ap.add_argument("--lease", type=float, default=30.0,
                    help="rlock's lease in seconds, 0 for the watchdog (default 30: "
                         "redis-py's Lock(timeout=30) and rlock-bench's S1-S4 "
                         "take a fixed 30-s lease too)")
    ap.add_argument("--p1-rounds", type=int, default=7,
                    help="alternating P1 rounds (rlock, redis-py, C S1 each round)")
    a = ap.parse_args()
    proc = tmpdir = None
    port = a.port
    if port is None:
        proc, port, tmpdir = start_server()
    try:
        sides = [RlockSide(port, a.lease if a.lease > 0 else None), RedisPySide(port)]
        print(f"Python {sys.version.split()[0]} ({sys.executable}), rlock {rlock.library_version()}, "
              f"redis-py {redis.__version__}, redis-server on :{port}; rlock's lease "
              f"{'the watchdog' if a.lease <= 0 else f'{a.lease:g} s'}, redis-py's timeout 30 s")
        res = {}
        steal = Steal()
        # alternate: each scenario runs for both before the next; P1
        # --p1-rounds times (7), beside the C benchmark's S1 each time: a
        # single run's p50 lands anywhere from about 55 to 115 us on a
        # shared 2-CPU machine (where the scheduler puts the loop thread
        # against the server's), for the C benchmark as much as for the
        # binding, so only the medians of many alternating runs compare
        p1 = {"rlock": [], "redis-py": [], "C": []}
        for _ in range(max(1, a.p1_rounds)):
            for s in sides:
                p1[s.name].append(steal.run(f"P1 {s.name}", p1_single, s, a.seconds))
            if a.c_bench:
                p1["C"].append(steal.run("P1 C", c_s1_p50, a.c_bench, port, a.seconds))
        for s in sides:
            res[(s.name, "P1")] = (statistics.median(x[0] for x in p1[s.name]),
                                   statistics.median(x[1] for x in p1[s.name]))
        print("P1 p50 runs (us): rlock", [round(x[0]) for x in p1["rlock"]],
              "redis-py", [round(x[0]) for x in p1["redis-py"]],
              "C S1", [round(x) for x in p1["C"]])
        runs = {}
        for _ in range(3):
            for s in sides:
                runs.setdefault((s.name, "P2"), []).append(
                    steal.run(f"P2 {s.name}", p2_distinct, s, a.seconds))
        res[("rlock", "P3")] = steal.run("P3 rlock", p3_handoff, sides[0], 100)
        res[("redis-py", "P3")] = steal.run("P3 redis-py", p3_handoff, sides[1], 30)
        for _ in range(3):
            for s in sides:
                runs.setdefault((s.name, "P4"), []).append(
                    steal.run(f"P4 {s.name}", p4_one_lock, s, a.seconds))
        for k, v in runs.items():
            res[k] = statistics.median(v)
            print(f"{k[1]} {k[0]} runs (/s):", [round(x) for x in v])
        c50 = statistics.median(p1["C"]) if p1["C"] else float("nan")
        (p1r, p1rate), (p1p, p1prate) = res[("rlock", "P1")], res[("redis-py", "P1")]
        rows = [
            ("P1 single-thread pair p50", f"{p1r:.0f} us", f"{p1p:.0f} us",
             f"{p1p / p1r:.2f}x", ">= 1.0x", p1p / p1r >= 1.0),
            ("P1 rlock p50 / C S1 p50", f"{p1r:.0f} / {c50:.0f} us", "",
             f"{p1r / c50:.2f}", "<= 1.3", p1r / c50 <= 1.3),
            ("P2 8 threads distinct locks", f"{res[('rlock', 'P2')]:.0f}/s",
             f"{res[('redis-py', 'P2')]:.0f}/s",
             f"{res[('rlock', 'P2')] / res[('redis-py', 'P2')]:.2f}x", ">= 2x",
             res[("rlock", "P2")] / res[("redis-py", "P2")] >= 2),
            ("P3 handoff p50", f"{res[('rlock', 'P3')]:.0f} us",
             f"{res[('redis-py', 'P3')]:.0f} us",
             f"{res[('redis-py', 'P3')] / res[('rlock', 'P3')]:.1f}x", ">= 10x",
             res[("redis-py", "P3")] / res[("rlock", "P3")] >= 10),
            ("P4 16 threads one lock", f"{res[('rlock', 'P4')]:.0f}/s",
             f"{res[('redis-py', 'P4')]:.0f}/s",
             f"{res[('rlock', 'P4')] / res[('redis-py', 'P4')]:.2f}x", ">= 2x",
             res[("rlock", "P4")] / res[("redis-py", "P4")] >= 2),
        ]
        print(f"\n| scenario | rlock | redis-py | rlock's advantage | target | |")
        print("|---|---|---|---|---|---|")
        for name, a1, a2, ratio, target, ok in rows:
            print(f"| {name} | {a1} | {a2} | {ratio} | {target} | {'pass' if ok else 'MISS'} |")
        print(f"\n(P1 pairs/s: rlock {p1rate:.0f}, redis-py {p1prate:.0f})")
        steal.report()
        if a.rss:
            acq, rel = sides[0].lock("pb:rss")
            for _ in range(10000):
                acq(); rel()
            before = rss_kb()
            t0 = time.monotonic()
            for _ in range(a.rss):
                acq(); rel()
            after = rss_kb()
            print(f"RSS: {a.rss} pairs in {time.monotonic() - t0:.0f} s: "
                  f"{before} kB -> {after} kB ({after - before:+d} kB)")
        for s in sides:
            s.close()
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
            shutil.rmtree(tmpdir, ignore_errors=True)


if __name__ == "__main__":
    main()
