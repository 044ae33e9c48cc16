"""Helpers of the interop tests: the real Java Redisson peer (its line
protocol: /work/shared/redisson/README.md's "The line protocol") and a
Redis Cluster of three masters."""
import os
import queue
import shutil
import subprocess
import threading
import time

from conftest import REPO, Server


def peer_path() -> str:
    """$REDISSON_PEER, else shared/redisson/peer beside the repository (or
    beside one of its parents: a worktree), never skipped."""
    env = os.environ.get("REDISSON_PEER")
    if env:
        return env
    d = os.path.abspath(REPO)
    while True:
        cand = os.path.join(os.path.dirname(d), "shared", "redisson", "peer")
        if os.path.exists(cand):
            return cand
        if os.path.dirname(d) == d:
            break
        d = os.path.dirname(d)
    raise AssertionError("the Redisson peer is not found: put shared/redisson "
                         "beside the repository or set REDISSON_PEER")


class Peer:
    """One Java Redisson client, driven line by line."""

    def __init__(self, target: str):
        self.proc = subprocess.Popen([peer_path(), target], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, bufsize=1)
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.errors = []
        threading.Thread(target=self._read_err, daemon=True).start()
        line = self.next(300)  # the first run compiles the driver
        assert line.startswith("ID "), line
        self.id = line.split()[1]
        assert self.next(60) == "READY"

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def _read_err(self):
        for line in self.proc.stderr:
            self.errors.append(line)

    def next(self, timeout=30) -> str:
        line = self.lines.get(timeout=timeout)
        assert line is not None, "peer exited: " + "".join(self.errors[-20:])
        return line

    def send(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def call(self, line: str, timeout=30) -> str:
        """An untagged command: its answer ("OK ..." without the timing)."""
        self.send(line)
        return self.answer(self.next(timeout))

    @staticmethod
    def answer(line: str) -> str:
        return line.split(" (")[0] if line.startswith(("OK", "ERR")) or ": OK" in line else line

    def close(self):
        try:
            self.send("quit")
            self.proc.wait(15)
        except Exception:
            self.proc.kill()
            self.proc.wait()


class Cluster:
    """Three masters, slots spread by redis-cli --cluster create."""

    def __init__(self):
        self.nodes = [Server(["--cluster-enabled", "yes",
                              "--cluster-config-file", "nodes.conf",
                              "--cluster-node-timeout", "5000"]) for _ in range(3)]
        addrs = [f"127.0.0.1:{n.port}" for n in self.nodes]
        subprocess.run([shutil.which("redis-cli") or "redis-cli", "--cluster", "create",
                        *addrs, "--cluster-replicas", "0", "--cluster-yes"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       timeout=60)
        deadline = time.monotonic() + 30
        for n in self.nodes:
            r = n.redis()
            while b"cluster_state:ok" not in r.execute_command("CLUSTER", "INFO"):
                assert time.monotonic() < deadline, "cluster not ok"
                time.sleep(0.05)
            r.close()
        self.seeds = ",".join(addrs)
        self.uri = "redis+cluster://" + self.seeds

    def redis(self):
        from redis.cluster import RedisCluster
        return RedisCluster(host="127.0.0.1", port=self.nodes[0].port)

    def stop(self):
        for n in self.nodes:
            n.stop()
