"""``drover serve --workers N``: N server processes on one machine sharing one port.

The parent reserves the port (``SO_REUSEPORT``, never listening itself), starts N ordinary
``drover serve`` processes that listen on it with ``SO_REUSEPORT`` — the kernel spreads new
connections across them — and prints ``drover serve: listening on http://HOST:PORT`` once all
of them accept connections. It restarts a worker that dies (another worker takes over the dead
one's turns, as any process on the shared journal would) and, on SIGTERM or Ctrl-C, stops every
worker the way one ``drover serve`` stops, then exits 0. The workers share state only through
PostgreSQL (and Redis), so the same flags work for processes on several machines behind a
load balancer.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import sys

from drover.errors import ConfigError

PREFIX = "drover serve: listening on "
#: Seconds a worker may take to start.
START_BOUND = 120.0


def _worker_argv(argv: list[str], port: int) -> list[str]:
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in ("--workers", "--port"):
            skip = True
            continue
        if arg.startswith(("--workers=", "--port=")):
            continue
        out.append(arg)
    return [sys.executable, "-m", "drover.cli.main", *out, "--port", str(port), "--reuse-port"]


def check(args: argparse.Namespace) -> None:
    if args.workers < 1:
        raise ConfigError("--workers must be at least 1")
    db = (args.db or os.environ.get("DROVER_DB") or "").strip().lower()
    if args.workers > 1 and not db.startswith(("postgresql://", "postgres://")):
        raise ConfigError("--workers above 1 needs a shared journal: --db postgresql://…")


def _reserve(host: str, port: int) -> socket.socket:
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
    except OSError as exc:
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


class _Pool:
    def __init__(self, argv: list[str]) -> None:
        self.argv = argv
        self.procs: list[asyncio.subprocess.Process] = []
        self.stopping = asyncio.Event()

    async def spawn(self) -> tuple[asyncio.subprocess.Process, str]:
        proc = await asyncio.create_subprocess_exec(
            *self.argv, stdout=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL
        )
        self.procs.append(proc)
        assert proc.stdout is not None
        try:
            line = (await asyncio.wait_for(proc.stdout.readline(), START_BOUND)).decode()
        except TimeoutError:
            line = ""
        asyncio.get_running_loop().create_task(self._drain(proc))
        return proc, line

    @staticmethod
    async def _drain(proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        while await proc.stdout.readline():
            pass

    def stop(self) -> None:
        self.stopping.set()
        for proc in self.procs:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)

    async def supervise(self, proc: asyncio.subprocess.Process) -> None:
        """Wait for a worker; restart it when it dies while the pool runs."""
        while True:
            code = await proc.wait()
            self.procs.remove(proc)
            if self.stopping.is_set():
                return
            print(
                f"drover serve: worker {proc.pid} exited ({code}); restarting it", file=sys.stderr
            )
            proc, line = await self.spawn()
            if not line.startswith(PREFIX):
                print("drover serve: a worker failed to restart", file=sys.stderr, flush=True)


async def run_pool(args: argparse.Namespace, argv: list[str]) -> int:
    """Run ``args.workers`` workers until stopped; ``argv`` is this command's arguments."""
    check(args)
    reserved = _reserve(args.host, args.port)
    host, port = reserved.getsockname()[:2]
    pool = _Pool(_worker_argv(argv, port))
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, pool.stop)
    try:
        started = await asyncio.gather(*(pool.spawn() for _ in range(args.workers)))
        if not all(line.startswith(PREFIX) for _, line in started):
            pool.stop()
            await asyncio.gather(*(p.wait() for p, _ in started))
            print("drover serve: a worker did not start", file=sys.stderr, flush=True)
            return 1
        shown = f"[{host}]" if ":" in host else host
        print(f"{PREFIX}http://{shown}:{port}", flush=True)
        print(f"drover serve: {args.workers} workers", file=sys.stderr, flush=True)
        await asyncio.gather(*(pool.supervise(p) for p, _ in started))
    finally:
        pool.stop()
        for proc in list(pool.procs):
            await proc.wait()
        reserved.close()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    print("drover serve: stopped", file=sys.stderr, flush=True)
    return 0
