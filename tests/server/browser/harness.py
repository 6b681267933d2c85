"""What the browser tests drive: a real ``drover serve`` process, a gate in front of the fake
LLM, the HTTP API read directly, and the transcript read back out of the page's DOM.

* :class:`DroverServe` — ``drover serve`` as a user starts it (a subprocess on a free loopback
  port, a SQLite journal, the fake LLM as its model API); ready once its API answers.
* :class:`GateProxy` — a TCP relay between drover and the fake LLM that forwards a model reply
  frame by frame and stops after the N-th text delta until the test releases it. A stream is
  then provably mid-text while the test reloads the page; no timing is involved.
* :func:`dom_transcript` / :func:`api_transcript` — the same flat shape from the page and from
  ``GET /v1/sessions/{id}``, so a test compares what is shown with what is stored.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

DROVER = [sys.executable, "-m", "drover.cli.main"]
#: Failure bounds, never pacing: a healthy run finishes far inside them.
START_TIMEOUT = 30.0
STOP_TIMEOUT = 15.0


_LISTENING = re.compile(r"listening on (http://\S+)")


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    for name in ("DROVER_DB", "DROVER_TOKEN"):
        env.pop(name, None)
    env["DROVER_CONFIG"] = "/nonexistent/drover-config.toml"
    env.update(extra)
    return env


class ApiError(Exception):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body}")
        self.status = status


class DroverServe:
    """A ``drover serve`` subprocess; use as a context manager."""

    def __init__(
        self,
        *,
        model_base_url: str,
        workdir: Path,
        db: Path,
        log: Path,
        permission_mode: str = "ask",
        token: str | None = None,
        port: int = 0,
    ) -> None:
        self.url = ""
        self.token = token
        self.log_path = log
        self.args = [
            *DROVER,
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--model",
            "anthropic:test",
            "--base-url",
            model_base_url,
            "--db",
            str(db),
            "--workdir",
            str(workdir),
            "--permission-mode",
            permission_mode,
        ]
        self.env = clean_env(ANTHROPIC_API_KEY="test")
        if token is not None:
            self.env["DROVER_TOKEN"] = token
        self.proc: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None

    def __enter__(self) -> DroverServe:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Start it and return once it prints the address it listens on."""
        listening = threading.Event()
        self.proc = subprocess.Popen(
            self.args,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        stdout = self.proc.stdout
        assert stdout is not None

        def read() -> None:
            with self.log_path.open("ab") as log:
                for line in stdout:
                    log.write(line)
                    log.flush()
                    match = _LISTENING.search(line.decode(errors="replace"))
                    if match and not listening.is_set():
                        self.url = match.group(1)
                        listening.set()
            listening.set()  # it exited: start() reports that

        self._reader = threading.Thread(target=read, daemon=True)
        self._reader.start()
        if not listening.wait(START_TIMEOUT) or not self.url:
            self.stop()
            raise RuntimeError(f"drover serve did not start:\n{self.log()}")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(STOP_TIMEOUT)
        if self._reader is not None:
            self._reader.join(STOP_TIMEOUT)
        if proc.stdout is not None:
            proc.stdout.close()

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def kill(self) -> None:
        """SIGKILL, as a crash: nothing gets to clean up."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(STOP_TIMEOUT)
        self.stop()

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-6000:]
        except OSError:
            return ""

    def request(self, method: str, path: str, body: object | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self.token is not None:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=10) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            raise ApiError(exc.code, exc.read().decode(errors="replace")) from None

    def snapshot(self, session_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self.request("GET", f"/v1/sessions/{session_id}")
        return result

    def create_session(self) -> str:
        return str(self.request("POST", "/v1/sessions", {})["id"])


class GateProxy:
    """Relays TCP between drover and the fake LLM; holds replies at chosen text deltas.

    Replies are forwarded up to the end of each SSE frame (a blank line). After the N-th frame
    that holds ``marker`` (a ``text_delta`` unless told; counted over all replies), for each N
    of ``hold_at``, the relay stops forwarding until :meth:`release`; :meth:`wait_held`
    returns once it holds.
    """

    def __init__(
        self, upstream_port: int, hold_at: tuple[int, ...], marker: bytes = b"text_delta"
    ) -> None:
        self.upstream_port = upstream_port
        self.marker = marker
        self._holds = {n: (threading.Event(), threading.Event()) for n in hold_at}
        self._count = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._closed = False

    def wait_held(self, at: int, timeout: float = START_TIMEOUT) -> None:
        """Wait until the relay holds after marked frame number ``at``."""
        if not self._holds[at][0].wait(timeout):
            raise AssertionError(f"the model's reply never reached {self.marker!r} {at}")

    def release(self, at: int) -> None:
        self._holds[at][1].set()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> GateProxy:
        self._spawn(self._accept)
        return self

    def close(self) -> None:
        self._closed = True
        for _, released in self._holds.values():
            released.set()
        for sock in [self._listener, *self._sockets]:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        for thread in self._threads:
            thread.join(STOP_TIMEOUT)

    def _spawn(self, target: Any, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            self._sockets += [client, upstream]
            self._spawn(self._pipe, client, upstream, False)
            self._spawn(self._pipe, upstream, client, True)

    def _pipe(self, source: socket.socket, sink: socket.socket, gated: bool) -> None:
        frame = b""  # the current SSE frame so far (already forwarded)
        try:
            while data := source.recv(65536):
                if not gated:
                    sink.sendall(data)
                    continue
                seen = frame + data
                sent, begin = len(frame), 0
                while (end := seen.find(b"\n\n", begin)) >= 0:
                    end += 2
                    hold = self._hold_for(seen[begin:end])
                    if hold is not None:
                        sink.sendall(seen[sent:end])
                        sent = end
                        hold[0].set()
                        hold[1].wait()
                    begin = end
                sink.sendall(seen[sent:])
                frame = seen[begin:]
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)

    def _hold_for(self, frame: bytes) -> tuple[threading.Event, threading.Event] | None:
        if self.marker not in frame:
            return None
        with self._lock:
            self._count += 1
            return self._holds.get(self._count)


# -- the transcript, from the page and from the API --------------------------------------------

_DOM_SCRIPT = """
() => [...document.querySelectorAll('#transcript .turn')].map((turn) => ({
  id: turn.dataset.turnId,
  status: turn.dataset.status,
  user: turn.querySelector('.user-message').hidden
    ? null : turn.querySelector('.user-message').textContent,
  blocks: [...turn.querySelectorAll('.step > .block.text, .step > .tool-card')].map((b) =>
    b.classList.contains('tool-card')
      ? {type: 'tool', id: b.dataset.callId, state: b.dataset.state,
         name: b.querySelector('.tool-name').textContent,
         output: b.querySelector('.tool-output').hidden
           ? null : b.querySelector('.tool-output').textContent,
         outcome_unknown: !b.querySelector('.outcome-unknown').hidden}
      : {type: 'text', text: b.innerText.split(/\\s+/).filter(Boolean).join(' ')}),
}))
"""


def dom_transcript(page: Any) -> list[dict[str, Any]]:
    """The turns as the page shows them: status, user text, then text and tool cards in order."""
    result: list[dict[str, Any]] = page.evaluate(_DOM_SCRIPT)
    return result


def _words(text: str) -> str:
    return " ".join(text.split())


def api_transcript(snapshot: dict[str, Any]) -> list[dict[str, Any]]:
    """The same shape from a stored snapshot: a turn's assistant messages in order (text blocks
    and the tool calls they made, with each call's stored state and output), then any calls no
    message names."""
    turns = []
    for turn in snapshot["turns"]:
        calls = {c["call_id"]: c for c in turn["tool_calls"]}
        blocks: list[dict[str, Any]] = []
        named: set[str] = set()

        def card(call: dict[str, Any]) -> dict[str, Any]:
            return {
                "type": "tool",
                "id": call["call_id"],
                "state": call["state"],
                "name": call["name"],
                "output": call["output"],
                "outcome_unknown": bool(call["outcome_unknown"]),
            }

        for entry in turn["messages"]:
            message = entry["message"]
            if message["role"] != "assistant":
                continue
            for block in message["content"]:
                if block["type"] == "text":
                    blocks.append({"type": "text", "text": _words(block["text"])})
                elif block["type"] == "tool_use":
                    named.add(block["id"])
                    blocks.append(card(calls[block["id"]]))
        # A worker's calls (scoped ids "<task call>/<worker>/<id>") show under their task call.
        blocks += [
            card(c)
            for c in turn["tool_calls"]
            if c["call_id"] not in named and c["call_id"].rsplit("/", 2)[0] not in calls
        ]
        user = turn["user_message"]
        turns.append(
            {
                "id": turn["id"],
                "status": turn["status"],
                "user": None
                if user is None
                else "".join(b["text"] for b in user["content"] if b["type"] == "text"),
                "blocks": blocks,
            }
        )
    return turns


_DOM_MATCHES = (
    "(expected) => JSON.stringify((" + _DOM_SCRIPT.strip() + ")()) === JSON.stringify(expected)"
)


def settled_snapshot(server: DroverServe, session_id: str) -> dict[str, Any]:
    """The stored snapshot once no turn of the session is running."""
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        snapshot = server.snapshot(session_id)
        if not snapshot.get("running_turn_id") and all(
            t["status"] != "running" for t in snapshot["turns"]
        ):
            return snapshot
        if time.monotonic() > deadline:
            raise AssertionError(f"a turn is still running: {json.dumps(snapshot)[:2000]}")
        time.sleep(0.05)  # the turn's last writes are in flight: look again


def durable_text(server: DroverServe, session_id: str, text: str) -> None:
    """Wait until the journal holds ``text`` as the running turn's partial message."""
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        turns = server.snapshot(session_id)["turns"]
        messages = turns[-1]["messages"] if turns else []
        stored = [
            block["text"]
            for entry in messages
            for block in entry["message"]["content"]
            if block["type"] == "text"
        ]
        if stored and stored[-1] == text:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the journal never held {text!r}: {stored!r}")
        time.sleep(0.05)  # the journal flushes on its 250 ms timer: look again


def journal_files(tmp: Path) -> dict[Path, bytes]:
    """The test's journal (the database and its WAL files) as it is now."""
    return {path: path.read_bytes() for path in tmp.glob("journal.db*")}


def restore_journal(tmp: Path, saved: dict[Path, bytes]) -> None:
    """Put the journal back as :func:`journal_files` read it (no server may have it open)."""
    for path in tmp.glob("journal.db*"):
        path.unlink()
    for path, data in saved.items():
        path.write_bytes(data)


def assert_page_shows_stored_transcript(page: Any, server: DroverServe, session_id: str) -> None:
    """Wait until the page shows exactly the stored transcript; on timeout, show the diff."""
    expected = api_transcript(settled_snapshot(server, session_id))
    try:
        page.wait_for_function(_DOM_MATCHES, arg=expected)
    except Exception:
        assert dom_transcript(page) == expected
        raise
