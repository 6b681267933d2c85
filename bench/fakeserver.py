"""drover's fake LLM in its own process, timed per request, for the benchmarks.

:class:`FakeServerProcess` runs :class:`drover.testing.app.FakeLLMApp` under uvicorn in a
*separate process* (so its CPU does not compete for the benchmark's GIL), wrapped in an ASGI
layer that times every request — from the call of the app (request headers parsed) to the last
body byte sent — and answers ``/bench/*`` control requests.

Run ``python bench/fakeserver.py serve`` to start that server by hand; it prints ``port N``.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

# -- the fake LLM server in its own process ------------------------------------------------------


@dataclass(slots=True)
class _Timing:
    serial: int
    path: str
    start: float
    end: float | None = None
    #: When the request body had fully arrived (the app reads it first).
    received: float | None = None
    sent: int = 0
    frames: int = 0
    body: list[bytes] = field(default_factory=list)


def _streamed_text(body: bytes) -> str:
    """The text of the SSE frames sent so far (Chat Completions or Anthropic deltas)."""
    out: list[str] = []
    for line in body.split(b"\n"):
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        try:
            data = json.loads(line[6:])
        except ValueError:
            continue
        if not isinstance(data, dict):
            continue
        choices = data.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            content = (choices[0].get("delta") or {}).get("content")
            if isinstance(content, str):
                out.append(content)
        delta = data.get("delta")
        if isinstance(delta, dict) and isinstance(delta.get("text"), str):
            out.append(delta["text"])
        if data.get("type") == "response.output_text.delta" and isinstance(data.get("delta"), str):
            out.append(data["delta"])
    return "".join(out)


class TimedFakeApp:
    """ASGI: drover's fake LLM app, timed per request, plus ``/bench/*`` control routes."""

    def __init__(self) -> None:
        self._stopping: asyncio.Event | None = None
        self._app: Any = None
        self._ledger: Any = None
        self._timings: list[_Timing] = []

    def _load(self, data: object) -> None:
        from drover.testing.app import FakeLLMApp, Ledger
        from drover.testing.scenario import Scenario

        if self._stopping is None:
            self._stopping = asyncio.Event()
        scenario = Scenario.from_data(data)
        self._ledger = Ledger()
        self._ledger.load(scenario)
        self._app = FakeLLMApp(self._ledger, self._stopping)
        self._timings = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        path: str = scope["path"]
        if path.startswith("/bench/"):
            await self._control(path, scope, receive, send)
            return
        if self._app is None:
            self._load({"responses": []})
        timing = _Timing(serial=len(self._timings) + 1, path=path, start=time.perf_counter())
        for older in self._timings[-1:]:
            older.body.clear()  # keep the bytes of the latest request only
        self._timings.append(timing)

        async def timed_receive() -> Any:
            message = await receive()
            if message["type"] == "http.request" and not message.get("more_body", False):
                timing.received = time.perf_counter()
            return message

        async def timed_send(message: Any) -> None:
            if message["type"] == "http.response.body":
                chunk = message.get("body", b"")
                timing.sent += len(chunk)
                timing.frames += 1
                timing.body.append(chunk)
                await send(message)
                if not message.get("more_body", False):
                    timing.end = time.perf_counter()
                return
            await send(message)

        try:
            await self._app(scope, timed_receive, timed_send)
        finally:
            if timing.end is None:
                timing.end = time.perf_counter()

    async def _control(self, path: str, scope: Any, receive: Any, send: Any) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        status, answer = 200, dict[str, Any]()
        try:
            if path == "/bench/load":
                self._load(json.loads(body or b"{}"))
                answer = {"ok": True}
            elif path == "/bench/stats":
                answer = self._stats()
            else:
                status, answer = 404, {"error": f"no route {path}"}
        except Exception as exc:  # report it to the benchmark, which prints it
            status, answer = 500, {"error": f"{type(exc).__name__}: {exc}"}
        data = json.dumps(answer).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(data))]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": data, "more_body": False})

    def _stats(self) -> dict[str, Any]:
        now = time.perf_counter()
        requests = [
            {
                "serial": t.serial,
                "path": t.path,
                "start": t.start,
                "end": t.end,
                "seconds": (t.end if t.end is not None else now) - t.start,
                "receive_seconds": (t.received or t.start) - t.start,
                "done": t.end is not None,
                "bytes": t.sent,
                "frames": t.frames,
            }
            for t in self._timings
        ]
        last = self._timings[-1] if self._timings else None
        snapshot = self._ledger.snapshot() if self._ledger is not None else ([], [], [], 0)
        return {
            "now": now,
            "requests": requests,
            "last_text": _streamed_text(b"".join(last.body)) if last else "",
            "violations": snapshot[1],
            "unexpected": snapshot[2],
            "remaining": snapshot[3],
        }


def _serve() -> None:
    import uvicorn

    # proto=IPPROTO_TCP matters: asyncio sets TCP_NODELAY only on sockets whose proto says TCP,
    # and accepted sockets inherit the listener's. Without it every streamed reply stalls ~40 ms
    # (Nagle's algorithm against the client's delayed ACK) after its headers.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    config = uvicorn.Config(
        TimedFakeApp(),
        lifespan="off",
        http="h11",
        log_config=None,
        log_level="critical",  # a killed client's reply is cancelled at stop; no noise
        access_log=False,
        server_header=False,
        date_header=False,
        timeout_graceful_shutdown=1,
    )
    server = uvicorn.Server(config)
    print(f"port {sock.getsockname()[1]}", flush=True)
    server.run(sockets=[sock])


class FakeServerProcess:
    """The timed fake LLM in a child process; ``load()`` scripts it, ``stats()`` reads it."""

    def __init__(self, python: str = sys.executable) -> None:
        self._python = python
        self._proc: subprocess.Popen[str] | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        """The server process's id (0 when it is not running)."""
        return 0 if self._proc is None else self._proc.pid

    @property
    def openai_base_url(self) -> str:
        return f"{self.base_url}/v1"

    def start(self) -> None:
        self._proc = subprocess.Popen(
            [self._python, str(Path(__file__).resolve()), "serve"],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline().strip()
        if not line.startswith("port "):
            self.stop()
            raise RuntimeError(f"fake server did not start (said {line!r})")
        self.port = int(line.split()[1])

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)

    def __enter__(self) -> FakeServerProcess:
        self.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _request(self, method: str, path: str, payload: object = None) -> Any:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            body = None if payload is None else json.dumps(payload)
            conn.request(method, path, body=body, headers={"content-type": "application/json"})
            response = conn.getresponse()
            data = json.loads(response.read() or b"{}")
        finally:
            conn.close()
        if response.status != 200:
            raise RuntimeError(f"fake server {path}: {data.get('error', response.status)}")
        return data

    def load(self, responses: Sequence[Mapping[str, Any]], **options: Any) -> None:
        """Replace the script (and forget the timings) with these scenario responses."""
        self._request("POST", "/bench/load", {"options": options, "responses": list(responses)})

    def stats(self) -> dict[str, Any]:
        return dict(self._request("GET", "/bench/stats"))

    def server_seconds(self) -> float:
        """Total time the fake spent answering the requests since the last ``load``."""
        return float(sum(r["seconds"] for r in self.stats()["requests"]))

    def check_clean(self) -> None:
        """Raise if the fake saw a history violation, an unexpected request or left a reply."""
        stats = self.stats()
        problems = [*stats["violations"], *stats["unexpected"]]
        if stats["remaining"]:
            problems.append(f"{stats['remaining']} scripted responses were not used")
        if problems:
            raise RuntimeError("fake server: " + "; ".join(problems[:3]))


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.02) -> bool:
    """Poll ``predicate`` until it holds or ``timeout`` seconds pass (bounded)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


if __name__ == "__main__":
    if sys.argv[1:] == ["serve"]:
        _serve()
    else:
        print("usage: python bench/fakeserver.py serve", file=sys.stderr)
        sys.exit(2)
