"""The reference MCP servers the tests start: where ``scripts/ci-deps`` installed them (npm, into
``.cache/npm-mcp``), configurations that start them, and an HTTP server process.

Where Node.js or the servers are missing, :func:`require_node` skips the test with a loud
reason (``-ra`` prints it); under ``DROVER_REQUIRE_NODE=1`` (CI) it fails it instead.

The stdio configurations go through ``sh -c`` when a test needs to watch the server from
outside: ``pidfile`` (``exec`` keeps the pid: the file holds the server's own), ``record``
(``tee`` copies every message drover sends the server into a file), ``once`` (a second start
fails with a line on stderr: a server that cannot be restarted).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import queue
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ROOT / ".cache" / "npm-mcp" / "node_modules" / "@modelcontextprotocol"
EVERYTHING = PACKAGES / "server-everything" / "dist" / "index.js"
FILESYSTEM = PACKAGES / "server-filesystem" / "dist" / "index.js"
REQUIRE_ENV = "DROVER_REQUIRE_NODE"
#: Failure bound of every wait on a server (a node start takes a second on a loaded machine).
DEADLINE = 60.0
#: What the ``once`` server says when it is started again.
REFUSAL = "this server refuses to start twice"


def require_node() -> None:
    why = None
    if shutil.which("node") is None:
        why = "Node.js is not installed"
    elif not EVERYTHING.is_file() or not FILESYSTEM.is_file():
        why = f"the reference MCP servers are not installed in {PACKAGES.parent.parent}"
    if why is None:
        return
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{why} ({REQUIRE_ENV}=1)", pytrace=False)
    pytest.skip(f"MCP TESTS SKIPPED: {why} — run scripts/ci-deps (it needs Node.js and npm)")


def everything(
    *,
    pidfile: Path | None = None,
    record: Path | None = None,
    once: bool = False,
    **extra: Any,
) -> dict[str, Any]:
    """A ``.mcp.json`` entry starting server-everything over stdio."""
    if pidfile is None and record is None:
        return {"command": "node", "args": [str(EVERYTHING), "stdio"], **extra}
    script = 'exec node "$1" stdio'
    if record is not None:
        assert pidfile is None, "a recorded server's pid is not the shell's"
        script = 'tee -a "$3" | exec node "$1" stdio'
    if pidfile is not None:
        script = f'echo $$ > "$2"; {script}'
        if once:
            script = f'if [ -e "$2" ]; then echo "{REFUSAL}" >&2; exit 3; fi; {script}'
    args = ["-c", script, "mcp-server", str(EVERYTHING), str(pidfile or ""), str(record or "")]
    return {"command": "sh", "args": args, **extra}


def filesystem(root: Path, **extra: Any) -> dict[str, Any]:
    """A ``.mcp.json`` entry starting server-filesystem on ``root``."""
    return {"command": "node", "args": [str(FILESYSTEM), str(root)], **extra}


def write_config(path: Path, servers: dict[str, Any]) -> Path:
    path.write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
    return path


def wait_for(check: Any, what: str, deadline: float = DEADLINE) -> Any:
    """Poll ``check()`` until it returns something true (the failure bound is ``deadline``)."""
    end = time.monotonic() + deadline
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.02)


async def until(check: Any, what: str, deadline: float = DEADLINE) -> None:
    """In a test's event loop: poll ``check()`` until it is true (bounded by ``deadline``)."""
    end = time.monotonic() + deadline
    while not check():
        if time.monotonic() > end:
            raise AssertionError(f"gave up waiting for {what}")
        await asyncio.sleep(0.01)


def read_pid(pidfile: Path) -> int:
    text = wait_for(lambda: pidfile.is_file() and pidfile.read_text().strip(), f"{pidfile}")
    return int(text)


def alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


def kill_server(pidfile: Path) -> int:
    """SIGKILL the server whose pid ``pidfile`` holds (this test's own); its pid."""
    pid = read_pid(pidfile)
    os.kill(pid, signal.SIGKILL)
    return pid


def recorded(record: Path) -> list[dict[str, Any]]:
    """The messages drover sent a ``record`` server so far."""
    if not record.is_file():
        return []
    out = []
    for line in record.read_text(encoding="utf-8").splitlines():
        with contextlib.suppress(ValueError):
            out.append(json.loads(line))
    return out


class HttpServer:
    """server-everything over streamable HTTP on ``port``, started and stopped at will."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self._process: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None

    def start(self) -> None:
        process = self._process = subprocess.Popen(
            ["node", str(EVERYTHING), "streamableHttp"],
            env={**os.environ, "PORT": str(self.port)},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        lines: queue.Queue[str] = queue.Queue()

        def read() -> None:
            assert process.stderr is not None
            for line in process.stderr:
                lines.put(line)

        self._reader = threading.Thread(target=read, daemon=True)
        self._reader.start()
        end = time.monotonic() + DEADLINE
        while True:
            try:
                line = lines.get(timeout=max(end - time.monotonic(), 0.01))
            except queue.Empty:
                self.stop()
                raise AssertionError("server-everything did not start listening") from None
            if "listening on port" in line:
                return

    @property
    def running(self) -> bool:
        return self._process is not None

    def stop(self, sig: int = signal.SIGTERM) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        process.send_signal(sig)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if self._reader is not None:
            self._reader.join(timeout=10)
        if process.stderr is not None:
            process.stderr.close()


@contextlib.contextmanager
def everything_http() -> Iterator[HttpServer]:
    """server-everything over streamable HTTP on a free port, started; stopped at the end."""
    server = HttpServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()
