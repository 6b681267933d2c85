"""What the door tests share: the AI SDK's own client (``node/chat_client.mjs`` on the ``ai``
package ``scripts/ci-deps`` installs into ``.cache/npm-ai``) driven over its stdin/stdout, a
gate that holds a turn in a tool call until the test opens it, and the scripted turns.

Where Node.js or the package is missing, :func:`require_node_packages` skips the test saying so
(``-ra`` prints it); under ``DROVER_REQUIRE_NODE=1`` (CI) it fails it instead.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import pytest

from ..support import BOUND

ROOT = Path(__file__).resolve().parents[3]
MODULES = ROOT / ".cache" / "npm-ai" / "node_modules"
CLIENT = Path(__file__).parent / "node" / "chat_client.mjs"
REQUIRE_ENV = "DROVER_REQUIRE_NODE"
SECRET = "sk-ant-api03-" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2" * 2
GATE_OUTPUT = "opened"


def require_node_packages(modules: Path, probe: str, what: str) -> None:
    """Skip the test (fail it under ``DROVER_REQUIRE_NODE=1``) unless Node.js and the npm
    packages installed in ``modules`` (a ``node_modules``, where ``probe`` is a file) are."""
    why = None
    if shutil.which("node") is None:
        why = "Node.js is not installed"
    elif not (modules / probe).is_file():
        why = f"{what} is not installed in {modules.parent}"
    if why is None:
        return
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{why} ({REQUIRE_ENV}=1)", pytrace=False)
    pytest.skip(f"NODE TESTS SKIPPED: {why} — run scripts/ci-deps (it needs Node.js and npm)")


def require_ai_sdk() -> None:
    require_node_packages(MODULES, "ai/dist/index.js", "the AI SDK (npm ai)")


class ChatClient:
    """One Node process running ``chat_client.mjs``: commands in, JSON lines out."""

    def __init__(self) -> None:
        env = {**os.environ, "DROVER_AI_SDK_MODULES": str(MODULES)}
        self.proc = subprocess.Popen(
            ["node", str(CLIENT)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.lines: list[dict[str, Any]] = []
        self._seen = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._seen:
                self.lines.append(json.loads(line))
                self._seen.notify_all()
        with self._seen:
            self.lines.append({"event": "exit"})
            self._seen.notify_all()

    def start(self, **command: Any) -> int:
        """Send a command; returns the index its output lines start at."""
        assert self.proc.stdin is not None
        with self._seen:
            at = len(self.lines)
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        return at

    def wait_for(self, at: int, test: Callable[[list[dict[str, Any]]], bool]) -> None:
        """Until ``test`` holds for the lines the command started at ``at`` printed."""
        with self._seen:
            ok = self._seen.wait_for(lambda: test(self.lines[at:]), BOUND)
        assert ok, f"the client never got there: {self.lines[at:][-5:]}"

    def result(self, at: int) -> dict[str, Any]:
        """The command's last line (``{"event": "end", "how", …}``), with ``chunks``."""
        self.wait_for(at, lambda got: any(line["event"] in ("end", "exit") for line in got))
        lines = self.lines[at:]
        end = next(line for line in lines if line["event"] in ("end", "exit"))
        assert end["event"] == "end", self.stderr()
        chunks = [line["chunk"] for line in lines[: lines.index(end)] if line["event"] == "chunk"]
        return {**end, "chunks": chunks}

    def run(self, **command: Any) -> dict[str, Any]:
        return self.result(self.start(**command))

    def stderr(self) -> str:
        if self.proc.poll() is None:
            return ""
        assert self.proc.stderr is not None
        return self.proc.stderr.read()

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=BOUND)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(BOUND)
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


def refused(reply: httpx2.Response, status: int, code: str, says: str = "") -> None:
    """``reply`` is the error ``code`` with ``status``, its message saying ``says``."""
    assert reply.status_code == status, reply.text
    error = reply.json()["error"]
    assert error["code"] == code and says in error["message"], error


def chunk_types(chunks: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [c for c in chunks if c["type"] == kind]


def has_chunk(kind: str, **fields: Any) -> Callable[[list[dict[str, Any]]], bool]:
    """A test for :meth:`ChatClient.wait_for`: a chunk of ``kind`` with ``fields`` came."""

    def test(lines: list[dict[str, Any]]) -> bool:
        return any(
            line["event"] == "chunk"
            and line["chunk"]["type"] == kind
            and all(line["chunk"].get(k) == v for k, v in fields.items())
            for line in lines
        )

    return test


class Gate:
    """A named pipe in the workdir: a ``bash`` call of ``cat gate`` blocks until
    :meth:`open` writes to it (the turn waits in its tool call, as long as the test needs)."""

    def __init__(self, workdir: Path) -> None:
        workdir.mkdir(exist_ok=True)
        self.path = workdir / "gate"
        os.mkfifo(self.path)

    def open(self) -> None:
        with self.path.open("w") as pipe:  # (blocks until the tool reads)
            pipe.write(GATE_OUTPUT + "\n")


GATED = {"name": "bash", "input": {"command": "cat gate"}}


def long_text(words: int) -> str:
    return " ".join(f"word{i}" for i in range(words))


def gated_turn(text: str, after: str = "Released.") -> list[dict[str, Any]]:
    """A turn that says ``text``, waits in a ``bash`` call on the gate, then says ``after``."""
    return [{"text": text, "tool_calls": [GATED], "delay": 0.001}, {"text": after}]
