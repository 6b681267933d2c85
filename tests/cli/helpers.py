"""Running ``drover`` as a user does: a real process, a clean environment, the fake server."""

from __future__ import annotations

import contextlib
import os
import pty
import select
import signal
import subprocess
import sys
import termios
import time
from pathlib import Path
from typing import Any

from support import forkserver

from drover.testing.server import FakeLLMServer

DROVER = [sys.executable, "-m", "drover.cli.main"]


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.pop("DROVER_DB", None)
    env["DROVER_CONFIG"] = "/nonexistent/drover-config.toml"
    env.update(extra)
    return env


def run_drover(args: list[str], *, env: dict[str, str] | None = None, timeout: float = 60) -> Any:
    """``drover ARGS`` to its end, stdin empty: exit code, stdout and stderr. The process is
    forked from the run's warm interpreter (:mod:`support.forkserver`), not started as
    ``python -m drover.cli.main``, unless ``DROVER_TEST_SPAWN=exec``."""
    if forkserver.forking():
        return forkserver.run(
            forkserver.shared(),
            args,
            env=env or clean_env(ANTHROPIC_API_KEY="test"),
            timeout=timeout,
            cwd=os.getcwd(),
        )
    return subprocess.run(
        [*DROVER, *args],
        capture_output=True,
        text=True,
        env=env or clean_env(ANTHROPIC_API_KEY="test"),
        stdin=subprocess.DEVNULL,
        timeout=timeout,
        check=False,
    )


def base_args(server: FakeLLMServer, tmp_path: Path) -> list[str]:
    return [
        "--model",
        "anthropic:test",
        "--base-url",
        server.base_url,
        "--db",
        str(tmp_path / "journal.db"),
        "--workdir",
        str(tmp_path),
        "--permission-mode",
        "allow",
    ]


class Terminal:
    """``drover`` on a real pseudo-terminal, as a person at a keyboard runs it.

    Echo is off, so the output read back is only what drover wrote. Waits are on output,
    never on time; ``timeout`` only bounds a wait that would otherwise hang the test.
    """

    def __init__(self, args: list[str], *, env: dict[str, str], timeout: float = 30) -> None:
        master, slave = pty.openpty()
        attrs = termios.tcgetattr(slave)
        attrs[3] &= ~termios.ECHO
        termios.tcsetattr(slave, termios.TCSANOW, attrs)
        self.proc = subprocess.Popen(
            [*DROVER, *args], stdin=slave, stdout=slave, stderr=slave, env=env
        )
        os.close(slave)
        self._fd = master
        self._seen = b""
        self.timeout = timeout

    def expect(self, text: str) -> str:
        """Read until ``text`` appears; returns the output up to and including it."""
        wanted = text.encode()
        deadline = time.monotonic() + self.timeout
        while wanted not in self._seen:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self._fd], [], [], max(left, 0))
            if not ready:
                raise AssertionError(f"no {text!r} from drover; it wrote {self._seen!r}")
            try:
                chunk = os.read(self._fd, 4096)
            except OSError:  # EIO: the process closed the terminal
                chunk = b""
            if not chunk:
                raise AssertionError(f"drover ended before {text!r}; it wrote {self._seen!r}")
            self._seen += chunk
        end = self._seen.index(wanted) + len(wanted)
        before, self._seen = self._seen[:end], self._seen[end:]
        return before.decode(errors="replace")

    def type(self, line: str) -> None:
        os.write(self._fd, line.encode() + b"\n")

    def interrupt(self) -> None:
        self.proc.send_signal(signal.SIGINT)

    def close(self) -> int:
        """End the session with Ctrl-D and return the exit status."""
        with contextlib.suppress(OSError):
            os.write(self._fd, b"\x04")
        try:
            return self.proc.wait(timeout=self.timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            os.close(self._fd)
