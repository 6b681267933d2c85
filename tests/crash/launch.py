"""Starting drover processes for the crash tests: the literal command line or a fork server.

See :mod:`tests.crash.conftest` for why a fork server exists and what it shares.
"""

from __future__ import annotations

import contextlib
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
from pathlib import Path
from typing import Any, NoReturn, Protocol

#: Failure bound of every wait (an interpreter start alone takes seconds on a loaded machine).
DEADLINE = 90.0
#: How often file and database conditions are re-checked while waiting for them.
POLL_INTERVAL = 0.01
#: Tail of stderr quoted in failure messages.
STDERR_TAIL = 3000
#: ``exec`` starts every run as ``python -m drover.cli.main``; anything else uses the fork server
#: except for the runs that ask for ``exec``.
SPAWN_ENV = "DROVER_CRASH_SPAWN"


def drover_env(scratch: Path) -> dict[str, str]:
    """The environment of a drover process: test keys, no user config, no stray settings."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DROVER_", "ANTHROPIC_", "OPENAI_", "PYTEST_"))
    }
    env["ANTHROPIC_API_KEY"] = "test"
    env["OPENAI_API_KEY"] = "test"
    env["DROVER_CONFIG"] = str(scratch / "no-config.toml")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def drover_argv(
    prompt: str,
    *,
    base_url: str,
    db: Path,
    session: str,
    workdir: Path,
    model: str = "anthropic:test",
    permission_mode: str = "allow",
    output_format: str = "stream-json",
) -> list[str]:
    return [
        "-p",
        prompt,
        "--model",
        model,
        "--base-url",
        base_url,
        "--db",
        str(db),
        "--session",
        session,
        "--workdir",
        str(workdir),
        "--permission-mode",
        permission_mode,
        "--output-format",
        output_format,
    ]


# -- starting processes -----------------------------------------------------------------------


class Child(Protocol):
    @property
    def pid(self) -> int: ...

    def poll(self) -> int | None:
        """The exit code (negative: killed by that signal), or None while it runs."""

    def wait(self, timeout: float) -> int: ...


class Launcher(Protocol):
    name: str

    def spawn(
        self, argv: Sequence[str], env: Mapping[str, str], stdin: int, stdout: int, stderr: int
    ) -> Child:
        """Start ``drover ARGV`` with these file descriptors as its standard streams."""


class _ExecChild:
    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self._proc = proc

    @property
    def pid(self) -> int:
        return self._proc.pid

    def poll(self) -> int | None:
        return self._proc.poll()

    def wait(self, timeout: float) -> int:
        return self._proc.wait(timeout)


class ExecLauncher:
    """``python -m drover.cli.main ARGV``: the literal command line."""

    name = "exec"

    def spawn(
        self, argv: Sequence[str], env: Mapping[str, str], stdin: int, stdout: int, stderr: int
    ) -> Child:
        proc = subprocess.Popen(
            [sys.executable, "-m", "drover.cli.main", *argv],
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            env=dict(env),
        )
        return _ExecChild(proc)


class _ForkedChild:
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
    """A warm interpreter (started with ``python launch.py --fork-server FD``) that forks one
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
            started = ready.get(timeout=DEADLINE)
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
        self, argv: Sequence[str], env: Mapping[str, str], stdin: int, stdout: int, stderr: int
    ) -> Child:
        request = json.dumps({"argv": list(argv), "env": dict(env)}).encode()
        with self._spawn_lock:
            socket.send_fds(self._sock, [request], [stdin, stdout, stderr])
            pid = self._pids.get(timeout=DEADLINE)
        if pid < 0:
            raise RuntimeError("the fork server stopped")
        return _ForkedChild(self, pid)

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
            self._proc.wait(DEADLINE)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(DEADLINE)
        self._reader.join(DEADLINE)


def _fork_server_main(fd: int) -> None:
    """The fork server's loop: import everything a run needs, then fork on request."""
    import importlib

    for module in (
        "drover.cli.main",
        "drover.cli.headless",
        "drover.cli.build",
        "drover.agent",
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


def launcher_for(spawn: str, fork_server: ForkServer) -> Launcher:
    if spawn == "exec" or os.environ.get(SPAWN_ENV) == "exec":
        return ExecLauncher()
    return fork_server


if __name__ == "__main__" and sys.argv[1:2] == ["--fork-server"]:
    _fork_server_main(int(sys.argv[2]))
