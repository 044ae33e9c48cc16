"""Fixtures of the Python suite: real redis-servers on free loopback ports
(stopped by PID), the Redisson peer and rlock's CLI. Run by `meson test
--suite python` (the Python meson runs under: /usr/bin/python3 with
Debian's meson) or by hand:
    PYTHONPATH=build/python /usr/bin/python3 -m pytest python/tests
"""
import os
import shutil
import socket
import subprocess
import tempfile
import time

import pytest

REPO = os.environ.get("RLOCK_SOURCE_ROOT") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def redis_bin() -> str:
    b = os.environ.get("REDIS_SERVER") or shutil.which("redis-server")
    assert b, "redis-server not found (apt-get install redis-server)"
    return b


class Server:
    def __init__(self, args=(), tmp=None):
        self.dir = tempfile.mkdtemp(prefix="rlock-py-")
        for _ in range(20):
            self.port = free_port()
            self.proc = subprocess.Popen(
                [redis_bin(), "--port", str(self.port), "--bind", "127.0.0.1",
                 "--save", "", "--appendonly", "no", "--dir", self.dir,
                 *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if self._wait_up():
                return
            self.proc.kill()
            self.proc.wait()
        raise RuntimeError("cannot start redis-server")

    def _wait_up(self) -> bool:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                with socket.create_connection(("127.0.0.1", self.port), 0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return True
            except OSError:
                pass
            time.sleep(0.02)
        return False

    @property
    def uri(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def redis(self):
        import redis
        return redis.Redis(host="127.0.0.1", port=self.port)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def server():
    s = Server()
    yield s
    s.stop()


@pytest.fixture
def r(server):
    c = server.redis()
    yield c
    c.close()


@pytest.fixture
def client(server):
    import rlock
    c = rlock.Client(server.uri)
    yield c
    c.close()


_names = iter(range(1, 1 << 30))


@pytest.fixture
def name(request):
    """A lock name of its own for each test."""
    return f"py:{request.node.name}:{next(_names)}"
