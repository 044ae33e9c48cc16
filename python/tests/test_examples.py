"""The examples of docs/python.md run."""
import os
import subprocess
import sys

import pytest

EX = os.path.join(os.path.dirname(__file__), "..", "examples")


@pytest.mark.parametrize("script,expect", [
    ("quickstart.py", "processing order 42"),
    ("async_quickstart.py", "gave up waiting"),
    ("fencing.py", "refused: RLOCK_ESTALE"),
])
def test_example_runs(server, script, expect):
    import rlock
    pkg_root = os.path.dirname(os.path.dirname(rlock.__file__))
    env = dict(os.environ, REDIS_URL=server.uri,
               PYTHONPATH=os.pathsep.join([pkg_root, os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, os.path.join(EX, script)], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert expect in out.stdout
    if script == "quickstart.py":
        assert "hold count 2" in out.stdout
