"""The fake LLM server: uvicorn serving :class:`~drover.testing.app.FakeLLMApp` on a local port.

:class:`FakeLLMServer` runs it in a background thread for tests (``start()`` returns once the
socket is bound and uvicorn reports it started; ``stop()`` ends stalled streams and returns
promptly); :func:`serve` runs it in the foreground for ``drover fake-llm`` until SIGINT/SIGTERM.

The socket is bound before uvicorn starts, so a busy port raises :class:`OSError` in the
caller and ``port=0`` gets an ephemeral port known at once. uvicorn's main loop (a 0.1 s poll)
and its graceful shutdown (fixed sleeps) are replaced by waits on one ``stopping`` event, which
also wakes stalled replies; this keeps a stop well under a tenth of a second.

Given a certificate (``ssl_certfile``, and ``ssl_keyfile`` unless the certificate file holds the
key too), the server speaks HTTPS instead, through uvicorn's own TLS, and its base URLs say
``https://``: tests of the clients' TLS boundary (CA trust, HTTPS proxies) need a real handshake.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

import uvicorn

from drover.testing.app import DroppedConnection, FakeLLMApp, FrameGate, Ledger, RecordedRequest
from drover.testing.scenario import Scenario, ScriptedResponse, load_scenario

_START_TIMEOUT = 10.0
_STOP_TIMEOUT = 10.0


class _HideDroppedConnections(logging.Filter):
    """Keeps uvicorn from logging a traceback for each connection dropped on purpose."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], DroppedConnection))


class _Uvicorn(uvicorn.Server):
    """uvicorn with event-driven run and shutdown instead of its polling loop."""

    def __init__(
        self, config: uvicorn.Config, stopping: asyncio.Event, on_ready: Callable[[], None]
    ) -> None:
        super().__init__(config)
        self._stopping = stopping
        self._on_ready = on_ready
        self._loop = asyncio.get_running_loop()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            self._on_ready()

    async def main_loop(self) -> None:
        await self._stopping.wait()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        self._loop.call_soon_threadsafe(self._stopping.set)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()
        for sock in sockets or []:
            sock.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()
        tasks = set(self.server_state.tasks)
        if tasks:
            _done, pending = await asyncio.wait(
                tasks, timeout=self.config.timeout_graceful_shutdown
            )
            for task in pending:
                task.cancel()
        # A signal ended the run on purpose; do not re-raise it once serve() returns.
        self._captured_signals.clear()


class FakeLLMServer:
    """A local server speaking the Anthropic, Chat Completions and Responses streaming APIs.

    Every request takes the next scripted response from one queue, whatever its protocol.
    Requests are recorded in :attr:`requests`; history-rule breaches in :attr:`violations`;
    requests that found the queue empty in :attr:`unexpected`.
    """

    def __init__(
        self,
        scenario: Scenario | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        report: Callable[[str], None] | None = None,
        ssl_certfile: str | Path | None = None,
        ssl_keyfile: str | Path | None = None,
    ) -> None:
        """``report``, if given, gets each violation or unexpected request as it happens;
        ``ssl_certfile`` (a PEM certificate chain) and ``ssl_keyfile`` (its PEM private key)
        make the server speak HTTPS."""
        self.host = host
        self.port = port
        self._ssl_certfile = ssl_certfile
        self._ssl_keyfile = ssl_keyfile
        #: The pytest fixture fails a test with violations / unexpected requests unless set.
        self.allow_violations = False
        self.allow_unexpected = False
        self._ledger = Ledger() if report is None else Ledger(report=report)
        if scenario is not None:
            self._ledger.load(scenario)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._log_filter = _HideDroppedConnections()
        self._gate = FrameGate()

    # --- addresses -----------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        scheme = "https" if self._ssl_certfile is not None else "http"
        return f"{scheme}://{host}:{self.port}"

    @property
    def anthropic_base_url(self) -> str:
        return self.base_url

    @property
    def openai_base_url(self) -> str:
        return f"{self.base_url}/v1"

    # --- script and records --------------------------------------------------------------------

    def script(self, *responses: Mapping[str, Any] | ScriptedResponse | Scenario) -> None:
        """Append responses (scenario-format dicts) to the queue; a Scenario also sets options."""
        for item in responses:
            if isinstance(item, Scenario):
                self._ledger.load(item)
            elif isinstance(item, ScriptedResponse):
                self._ledger.script([item], None)
            else:
                where = f"script response {self.remaining + 1}"
                self._ledger.script([ScriptedResponse.from_data(item, where)], None)

    @property
    def requests(self) -> list[RecordedRequest]:
        return self._ledger.snapshot()[0]

    @property
    def violations(self) -> list[str]:
        return self._ledger.snapshot()[1]

    @property
    def unexpected(self) -> list[str]:
        return self._ledger.snapshot()[2]

    def step(self, timeout: float = 10.0) -> bytes:
        """Let the next frame of the gated reply under way (``gate: true``) go; its bytes, once
        written to the client. Raises ``TimeoutError`` when none was written in ``timeout``
        seconds."""
        return self._gate.step(timeout)

    @property
    def remaining(self) -> int:
        """Scripted responses not consumed yet."""
        return self._ledger.snapshot()[3]

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        """Serve in a background thread; returns once the server accepts connections."""
        if self._thread is not None:
            raise RuntimeError("fake-llm server already started")
        sock = self._bind()
        self._ready.clear()
        self._failure = None
        self._thread = threading.Thread(
            target=self._run, args=(sock, self._ready.set), name="fake-llm", daemon=True
        )
        self._thread.start()
        if not self._ready.wait(_START_TIMEOUT) or self._failure is not None:
            self.stop()
            raise RuntimeError("fake-llm server did not start") from self._failure

    def stop(self) -> None:
        """Stop serving: in-flight and stalled streams are cut, then the thread is joined."""
        loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(stopping.set)
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(_STOP_TIMEOUT)

    def run(self, on_ready: Callable[[], None] = lambda: None) -> None:
        """Serve in the calling thread until SIGINT/SIGTERM (main thread) or :meth:`stop`."""
        self._run(self._bind(), on_ready)

    def __enter__(self) -> FakeLLMServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _bind(self) -> socket.socket:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY on accepted connections only for
        # sockets that say they are TCP; without it every streamed reply waits ~40 ms (Nagle
        # against the client's delayed ACK) after its headers.
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.bind((self.host, self.port))
            sock.listen(128)
        except OSError:
            sock.close()
            raise
        self.port = sock.getsockname()[1]
        return sock

    def _run(self, sock: socket.socket, on_ready: Callable[[], None]) -> None:
        logger = logging.getLogger("uvicorn.error")
        logger.addFilter(self._log_filter)
        try:
            asyncio.run(self._serve(sock, on_ready))
        except BaseException as exc:
            self._failure = exc
            if threading.current_thread() is threading.main_thread():
                raise
        finally:
            sock.close()
            logger.removeFilter(self._log_filter)
            self._ready.set()

    async def _serve(self, sock: socket.socket, on_ready: Callable[[], None]) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        config = uvicorn.Config(
            FakeLLMApp(self._ledger, self._stopping, self._gate),
            lifespan="off",
            http="h11",
            log_config=None,
            server_header=False,
            date_header=False,
            timeout_graceful_shutdown=2,
            ssl_certfile=self._ssl_certfile,
            ssl_keyfile=self._ssl_keyfile,
        )
        await _Uvicorn(config, self._stopping, on_ready).serve(sockets=[sock])


def serve(scenario_path: Path, host: str, port: int) -> None:
    """``drover fake-llm``: serve a scenario file until SIGINT/SIGTERM.

    Prints one line, ``fake-llm listening on http://HOST:PORT``, once connections are accepted.
    Violations and unexpected requests are reported on stderr as they happen.
    """

    def report(line: str) -> None:
        print(f"fake-llm: {line}", file=sys.stderr, flush=True)

    server = FakeLLMServer(load_scenario(scenario_path), host=host, port=port, report=report)
    server.run(on_ready=lambda: print(f"fake-llm listening on {server.base_url}", flush=True))
