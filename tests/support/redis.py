"""A throwaway Redis server for tests: ``redis-server`` on a free loopback port, no persistence.

:func:`server` starts Debian's ``redis-server`` (installed by ``scripts/ci-deps``) in a
temporary directory, bound to 127.0.0.1 only, with no RDB/AOF files, and stops it at the end.
:meth:`RedisServer.kill` and :meth:`RedisServer.restart` let a test lose Redis mid-turn (a
restart comes back empty, as a flushed or replaced Redis would, on the same port).

A missing binary fails the run with a hint to run ``scripts/ci-deps``; with
``DROVER_SKIP_REDIS=1`` the Redis tests are skipped instead, loudly.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.ports import free_port

SKIP_ENV = "DROVER_SKIP_REDIS"
BOUND = 30.0


@dataclass
class RedisServer:
    binary: str
    root: Path
    port: int
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        argv = [self.binary, "--bind", "127.0.0.1", "--port", str(self.port)]
        argv += ["--save", "", "--appendonly", "no", "--dir", str(self.root)]
        argv += ["--protected-mode", "yes", "--loglevel", "warning"]
        self.proc = subprocess.Popen(
            argv, cwd=self.root, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        deadline = time.monotonic() + BOUND
        while not self.ping():
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""
                pytest.fail(f"redis-server exited: {err.strip()}", pytrace=False)
            if time.monotonic() > deadline:
                pytest.fail("redis-server did not answer PING", pytrace=False)
            time.sleep(0.02)  # polling a readiness probe, bounded above

    def ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def command(self, *args: str) -> bytes:
        """One command in RESP, its raw reply (tests' probes: INFO, XLEN, …)."""
        out = b"*%d\r\n" % len(args) + b"".join(
            b"$%d\r\n%s\r\n" % (len(a.encode()), a.encode()) for a in args
        )
        with socket.create_connection(("127.0.0.1", self.port), timeout=BOUND) as sock:
            sock.sendall(out)
            data = b""
            sock.settimeout(0.5)
            with contextlib.suppress(TimeoutError):
                while chunk := sock.recv(65536):
                    data += chunk
        return data

    def kill(self) -> None:
        """SIGKILL: everything in memory is gone."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(BOUND)
        if self.proc is not None and self.proc.stderr is not None:
            self.proc.stderr.close()
        self.proc = None

    def restart(self) -> None:
        self.kill()
        self.start()


@contextlib.contextmanager
def server() -> Iterator[RedisServer]:
    binary = shutil.which("redis-server") or (
        "/usr/bin/redis-server" if os.path.exists("/usr/bin/redis-server") else None
    )
    if binary is None:
        why = "redis-server not found"
        if os.environ.get(SKIP_ENV) == "1":
            pytest.skip(f"{why} ({SKIP_ENV}=1): the Redis tests did NOT run")
        pytest.fail(f"{why}: run scripts/ci-deps (or set {SKIP_ENV}=1 to skip)", pytrace=False)
    root = Path(tempfile.mkdtemp(prefix="drover-redis-"))
    redis = RedisServer(binary=binary, root=root, port=free_port())
    try:
        redis.start()
        yield redis
    finally:
        redis.kill()
        shutil.rmtree(root, ignore_errors=True)
