"""A warm interpreter that forks ``drover`` processes: the imports once, a real process per run.

Importing the provider SDKs takes seconds of CPU on the test machines, and most tests that run
``drover`` as a process start it many times. :class:`ForkServer` is one interpreter that
imports drover and the SDKs once, then forks a child per run which sets up its argv, standard
streams, environment and working directory and calls ``drover.cli.main.main(argv)`` — the
function ``python -m drover.cli.main`` runs. The run is its own OS process (own pid, own
SQLite connection, own owner id, killed with a real signal); only the imports happened before
the fork. What a forked run does not do is the interpreter's own start and exit: a test of
those (what a start imports, how the interpreter reports a closed stdout at exit) starts
``python -m drover.cli.main`` itself.

:class:`Popen` is the part of :class:`subprocess.Popen` the tests use, for a forked run;
:func:`run` is :func:`subprocess.run` with ``capture_output=True, text=True`` for one: it
returns a :class:`subprocess.CompletedProcess` once the process has exited and its output
pipes are closed, and on timeout kills it and raises :class:`subprocess.TimeoutExpired`.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import os
import queue
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

#: Failure bound of every wait (an interpreter start alone takes seconds on a loaded machine).
BOUND = 90.0
#: ``exec`` makes :func:`shared` users start every run as ``python -m drover.cli.main``.
SPAWN_ENV = "DROVER_TEST_SPAWN"


class ForkedChild:
    """A forked drover process, reaped by the fork server (which reports its exit code)."""

    def __init__(self, server: ForkServer, pid: int) -> None:
        self._server = server
        self._pid = pid

    @property
    def pid(self) -> int:
        return self._pid

    def poll(self) -> int | None:
        return self._server.exit_code(self._pid)

    def wait(self, timeout: float) -> int:
        return self._server.wait_exit(self._pid, timeout)


class ForkServer:
    """A warm interpreter (started with ``python forkserver.py --fork-server FD``) that forks one
    drover process per :meth:`spawn`, reaps them and reports their exit codes.

    Requests and replies are JSON messages on a ``SOCK_SEQPACKET`` socket pair; the child's
    standard streams travel with the request as passed file descriptors.
    """

    name = "fork"

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._sock = ours
        self._proc = subprocess.Popen(
            [sys.executable, __file__, "--fork-server", str(theirs.fileno())],
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
            env={k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")},
        )
        theirs.close()
        self._spawn_lock = threading.Lock()
        self._pids: queue.Queue[int] = queue.Queue()
        self._codes: dict[int, int] = {}
        self._cond = threading.Condition()
        self._closed = False
        ready: queue.Queue[bool] = queue.Queue()
        self._reader = threading.Thread(
            target=self._read, args=(ready,), name="fork-server", daemon=True
        )
        self._reader.start()
        try:
            started = ready.get(timeout=BOUND)
        except queue.Empty:
            started = False
        if not started:
            self.close()
            raise RuntimeError("the fork server did not start")

    def _read(self, ready: queue.Queue[bool]) -> None:
        try:
            while True:
                data = self._sock.recv(65536)
                if not data:
                    break
                message = json.loads(data)
                if "ready" in message:
                    ready.put(True)
                elif "pid" in message:
                    self._pids.put(int(message["pid"]))
                elif "exited" in message:
                    with self._cond:
                        self._codes[int(message["exited"])] = int(message["code"])
                        self._cond.notify_all()
        except OSError:
            pass
        finally:
            ready.put(False)
            self._pids.put(-1)
            with self._cond:
                self._closed = True
                self._cond.notify_all()

    def spawn(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        stdin: int,
        stdout: int,
        stderr: int,
        *,
        cwd: str | None = None,
    ) -> ForkedChild:
        """Fork ``drover ARGV`` with these file descriptors as its standard streams, in ``cwd``
        (else the fork server's working directory, the one the test run started in)."""
        request = json.dumps({"argv": list(argv), "env": dict(env), "cwd": cwd}).encode()
        with self._spawn_lock:
            socket.send_fds(self._sock, [request], [stdin, stdout, stderr])
            pid = self._pids.get(timeout=BOUND)
        if pid < 0:
            raise RuntimeError("the fork server stopped")
        return ForkedChild(self, pid)

    def exit_code(self, pid: int) -> int | None:
        with self._cond:
            return self._codes.get(pid)

    def wait_exit(self, pid: int, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        with self._cond:
            while pid not in self._codes:
                left = deadline - time.monotonic()
                if self._closed or left <= 0:
                    raise subprocess.TimeoutExpired(f"drover (pid {pid})", timeout)
                self._cond.wait(left)
            return self._codes[pid]

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        try:
            self._proc.wait(BOUND)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(BOUND)
        self._reader.join(BOUND)


def _fork_server_main(fd: int) -> None:
    """The fork server's loop: import everything a run needs, then fork on request."""
    import importlib

    for module in (
        "drover.cli.main",
        "drover.cli.headless",
        "drover.cli.build",
        "drover.agent.agent",
        "drover.providers.factory",
        "drover.providers.anthropic",
        "drover.providers.openai_chat",
        "drover.providers.openai_responses",
        # What the SDKs import lazily on their first request.
        "anyio._backends._asyncio",
        "h11",
        "httpcore",
        "httpcore2",
        "truststore",
        "anthropic.resources.messages",
        "openai.resources.chat.completions.completions",
        "openai.lib.streaming.chat",
        "openai.resources.responses.responses",
        "openai.lib.streaming.responses",
    ):
        # A module that does not import now fails again, visibly, in the child that needs it.
        with contextlib.suppress(Exception):
            importlib.import_module(module)
    sock = socket.socket(fileno=fd)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda _sig, _frame: None)
    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ)
    selector.register(wake_r, selectors.EVENT_READ)
    sock.send(b'{"ready": true}')
    while True:
        for key, _ in selector.select():
            if key.fileobj is sock:
                data, fds, _flags, _addr = socket.recv_fds(sock, 1 << 20, 3)
                if not data:
                    return
                pid = os.fork()
                if pid == 0:
                    _forked_child(json.loads(data), fds, [sock.fileno(), wake_r, wake_w])
                for passed in fds:
                    os.close(passed)
                sock.send(json.dumps({"pid": pid}).encode())
            else:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_r, 4096)
            while True:
                try:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    break
                code = os.waitstatus_to_exitcode(status)
                sock.send(json.dumps({"exited": pid, "code": code}).encode())


def _forked_child(request: Mapping[str, Any], fds: list[int], inherited: list[int]) -> NoReturn:
    """Become ``python -m drover.cli.main ARGV`` with the passed stdin, stdout and stderr."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in inherited:
            os.close(fd)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.environ.clear()
        os.environ.update(request["env"])
        if request.get("cwd") is not None:
            os.chdir(request["cwd"])
        sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.stderr = open(  # noqa: SIM115
            2, "w", encoding="utf-8", errors="backslashreplace", buffering=1, closefd=False
        )
        sys.argv = ["drover", *request["argv"]]
        from drover.cli.main import main

        code = main(request["argv"])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


@functools.cache
def shared() -> ForkServer:
    """The test run's fork server, started on first use and stopped when the run ends (one
    warm interpreter serves every suite; each run it forks is independent of the others)."""
    server = ForkServer()
    atexit.register(server.close)
    return server


def forking() -> bool:
    """Whether runs go through :func:`shared` (``DROVER_TEST_SPAWN=exec`` says no)."""
    return os.environ.get(SPAWN_ENV) != "exec"


def run(
    server: ForkServer,
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    timeout: float,
    cwd: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``drover ARGV`` forked, stdin from ``/dev/null``; its exit code, stdout and stderr."""
    stdin = os.open(os.devnull, os.O_RDONLY)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        child = server.spawn(argv, env, stdin, out_w, err_w, cwd=cwd)
    finally:
        for fd in (stdin, out_w, err_w):
            os.close(fd)
    try:
        # As subprocess.run: read both pipes until every writer closed them (a tool's own
        # child may hold them past drover's exit), then the exit code.
        out, err = _read_until_closed(out_r, err_r, time.monotonic() + timeout)
        code = child.wait(max(0.0, timeout))
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signal.SIGKILL)
        child.wait(BOUND)
        raise subprocess.TimeoutExpired(["drover", *argv], timeout) from None
    finally:
        os.close(out_r)
        os.close(err_r)
    return subprocess.CompletedProcess(["drover", *argv], code, _text(out), _text(err))


class Popen:
    """A forked ``drover ARGV`` as :class:`subprocess.Popen` (text mode, stdin from
    ``/dev/null``, stdout and stderr piped) shows it, for the part tests use: ``pid``,
    ``returncode``, :meth:`poll`, :meth:`wait`, :meth:`send_signal`, :meth:`kill`, and the
    ``stdout``/``stderr`` files."""

    def __init__(self, server: ForkServer, argv: Sequence[str], *, env: Mapping[str, str]) -> None:
        stdin = os.open(os.devnull, os.O_RDONLY)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            self._child = server.spawn(argv, env, stdin, out_w, err_w, cwd=os.getcwd())
        except BaseException:
            os.close(out_r)
            os.close(err_r)
            raise
        finally:
            for fd in (stdin, out_w, err_w):
                os.close(fd)
        self.pid = self._child.pid
        self.returncode: int | None = None
        self.stdout = open(out_r, encoding="utf-8")  # noqa: SIM115 (closed by the caller)
        self.stderr = open(err_r, encoding="utf-8")  # noqa: SIM115

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._child.poll()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self._child.wait(BOUND if timeout is None else timeout)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        # As Popen: nothing once it is known to have exited (its pid may be another's now).
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _read_until_closed(out_fd: int, err_fd: int, deadline: float) -> tuple[bytes, bytes]:
    chunks: dict[int, list[bytes]] = {out_fd: [], err_fd: []}
    with selectors.DefaultSelector() as selector:
        for fd in chunks:
            selector.register(fd, selectors.EVENT_READ)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired("drover", 0)
            for key, _ in selector.select(left):
                data = os.read(key.fd, 65536)
                if data:
                    chunks[key.fd].append(data)
                else:
                    selector.unregister(key.fd)
    return b"".join(chunks[out_fd]), b"".join(chunks[err_fd])


def _text(data: bytes) -> str:
    # What text=True gives: the locale's encoding (UTF-8 here), universal newlines.
    return data.decode().replace("\r\n", "\n").replace("\r", "\n")


if __name__ == "__main__" and sys.argv[1:2] == ["--fork-server"]:
    # Started as a script, its directory leads the path, where the test helpers named after
    # libraries (``redis.py``, ``pg.py``) would hide the libraries from drover.
    here = os.path.realpath(os.path.dirname(__file__))
    sys.path[:] = [entry for entry in sys.path if os.path.realpath(entry or ".") != here]
    _fork_server_main(int(sys.argv[2]))
