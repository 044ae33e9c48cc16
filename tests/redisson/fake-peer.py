#!/usr/bin/env python3
"""A broken Redisson peer, for check-bad-peer: FAKE_PEER_MODE says how.

exit     prints an error and exits before READY (a JVM that fails to start)
silent   never prints LISTEN (a JVM that hangs at start)
hang     listens, takes commands, never answers (a hung peer)
garbage  listens and answers every command with a line that is no answer
"""
import os
import socket
import sys
import threading
import time

mode = os.environ.get("FAKE_PEER_MODE", "exit")
if mode == "exit":
    print("Error: could not create the Java Virtual Machine.", file=sys.stderr)
    sys.exit(1)
if mode == "silent":
    print("ID 00000000-0000-0000-0000-000000000000", flush=True)
    while True:
        time.sleep(60)

srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(16)
print("ID 00000000-0000-0000-0000-000000000000", flush=True)
print("READY", flush=True)
print("LISTEN %d" % srv.getsockname()[1], flush=True)


def serve(conn):
    f = conn.makefile("rw")
    for line in f:
        tag = line.split(":", 1)[0] if ": " in line else None
        if mode == "garbage" and tag:
            f.write("%s: WHAT IS THIS (3 ms)\n" % tag)
            f.flush()


def accept():
    while True:
        conn, _ = srv.accept()
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


threading.Thread(target=accept, daemon=True).start()
sys.stdin.read()  # ends with the suite, like the real driver
