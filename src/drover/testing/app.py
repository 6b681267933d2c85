"""The fake LLM's ASGI application: one request in, one scripted response out, faults applied.

For every ``POST`` to ``/v1/messages``, ``/v1/chat/completions`` or ``/v1/responses`` it records
the request, resolves a Responses ``previous_response_id`` chain, checks the history with
:mod:`drover.testing.validate` (a violation is answered with the API's 400 and kept), takes the
next response from the :class:`Ledger`'s shared queue (none left: a 500 and an ``unexpected``
entry), and answers it — an HTTP error (a context overflow among them), a JSON object, or SSE
frames written one by one with the scripted delay and fault: an error frame (``error_after``),
an abrupt close (``drop_after``) or silence until the client leaves or the server stops
(``stall_after``, or ``hang`` before even the status line). A ``raw`` response is recorded
bytes, cut into SSE frames and written the same way with its own status and content type,
whatever the request asked for. A gated reply (``gate: true``) writes each frame only once the
test's thread lets it (:class:`FrameGate`).

The :class:`Ledger` and the :class:`FrameGate` are the only state shared with the thread that
owns the server, so they alone take a lock. Rendering runs on the server's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from drover.testing import validate
from drover.testing.scenario import (
    ContextOverflow,
    HttpError,
    RawReply,
    Scenario,
    ScenarioOptions,
    ScriptedResponse,
    StreamError,
)
from drover.testing.wire import (
    JSON_CONTENT_TYPE,
    SSE_CONTENT_TYPE,
    IdSource,
    ProtocolName,
    RenderContext,
    RenderedObject,
    RenderedStream,
    Reply,
    anthropic,
    dumps,
    openai_chat,
    openai_responses,
    split_frames,
    status_for_error,
)

NO_SCRIPT_LEFT = "fake-llm: no scripted response left"
_PATHS: dict[str, ProtocolName] = {
    "/v1/messages": "anthropic",
    "/v1/chat/completions": "openai-chat",
    "/v1/responses": "openai-responses",
}


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    protocol: ProtocolName
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass(frozen=True, slots=True)
class _Wire:
    render_stream: Callable[[ScriptedResponse, RenderContext], RenderedStream]
    render_object: Callable[[ScriptedResponse, RenderContext], RenderedObject]
    http_error: Callable[[HttpError, RenderContext], Reply]
    invalid_request: Callable[[str, RenderContext], Reply]
    context_overflow: Callable[[ContextOverflow, RenderContext], Reply]
    raw_error_frame: Callable[[StreamError | None, RenderContext, int], bytes]


_WIRES: dict[ProtocolName, _Wire] = {
    "anthropic": _Wire(
        anthropic.render_stream,
        anthropic.render_object,
        anthropic.http_error,
        anthropic.invalid_request,
        anthropic.context_overflow,
        anthropic.raw_error_frame,
    ),
    "openai-chat": _Wire(
        openai_chat.render_stream,
        openai_chat.render_object,
        openai_chat.http_error,
        openai_chat.invalid_request,
        openai_chat.context_overflow,
        openai_chat.raw_error_frame,
    ),
    "openai-responses": _Wire(
        openai_responses.render_stream,
        openai_responses.render_object,
        openai_responses.http_error,
        openai_responses.invalid_request,
        openai_responses.context_overflow,
        openai_responses.raw_error_frame,
    ),
}


class DroppedConnection(Exception):
    """Raised inside a reply so uvicorn closes the connection without ending the response."""


@dataclass
class Ledger:
    """Script queue, request records and stored responses, shared with the test's thread."""

    options: ScenarioOptions = field(default_factory=ScenarioOptions)
    #: Called with each violation or unexpected request as it happens (the CLI prints them).
    report: Callable[[str], None] = lambda _line: None
    ids: IdSource = field(default_factory=IdSource)
    _queue: deque[ScriptedResponse] = field(default_factory=deque)
    _requests: list[RecordedRequest] = field(default_factory=list)
    _violations: list[str] = field(default_factory=list)
    _unexpected: list[str] = field(default_factory=list)
    _stored: dict[str, list[Any]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def script(
        self, responses: Iterable[ScriptedResponse], options: ScenarioOptions | None
    ) -> None:
        with self._lock:
            self._queue.extend(responses)
            if options is not None:
                self.options = options

    def load(self, scenario: Scenario) -> None:
        self.script(scenario.responses, scenario.options)

    def record(self, request: RecordedRequest) -> int:
        with self._lock:
            self._requests.append(request)
            return len(self._requests)

    def pop(self) -> ScriptedResponse | None:
        with self._lock:
            return self._queue.popleft() if self._queue else None

    def violation(self, line: str) -> None:
        with self._lock:
            self._violations.append(line)
        self.report(f"violation: {line}")

    def unexpected(self, line: str) -> None:
        with self._lock:
            self._unexpected.append(line)
        self.report(f"unexpected: {line}")

    def store(self, response_id: str, items: list[Any]) -> None:
        with self._lock:
            self._stored[response_id] = items

    def stored(self, response_id: str) -> list[Any] | None:
        with self._lock:
            return self._stored.get(response_id)

    def snapshot(self) -> tuple[list[RecordedRequest], list[str], list[str], int]:
        with self._lock:
            return (
                list(self._requests),
                list(self._violations),
                list(self._unexpected),
                len(self._queue),
            )


class _JsonReply(Response):
    def __init__(self, reply: Reply) -> None:
        super().__init__(
            reply.encoded(),
            status_code=reply.status,
            headers=dict(reply.headers),
            media_type=JSON_CONTENT_TYPE,
        )


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


class FrameGate:
    """What lets the frames of a gated reply (``gate: true``) go, one at a time: the permits the
    test gave (:meth:`step`, from its own thread) and the frames sent since."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._permits = 0
        self._sent: list[bytes] = []
        # The reply waiting for a permit: its loop and the event that wakes it.
        self._waiting: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None

    async def take(self, stopping: asyncio.Event) -> None:
        """Until the test lets one more frame go (raise :class:`DroppedConnection` if the
        server stops meanwhile)."""
        while not stopping.is_set():
            with self._cond:
                if self._permits:
                    self._permits -= 1
                    return
                ready = asyncio.Event()
                self._waiting = (asyncio.get_running_loop(), ready)
            await _first(ready, stopping)
        raise DroppedConnection("server stopping")

    def sent(self, frame: bytes) -> None:
        with self._cond:
            self._sent.append(frame)
            self._cond.notify_all()

    def step(self, timeout: float) -> bytes:
        """Let the next frame go; it, once written. ``TimeoutError`` when none was within
        ``timeout`` seconds (no gated reply is under way)."""
        with self._cond:
            count = len(self._sent)
            self._permits += 1
            waiting, self._waiting = self._waiting, None
        if waiting is not None:
            loop, ready = waiting
            with contextlib.suppress(RuntimeError):  # (the loop closed: the server stopped)
                loop.call_soon_threadsafe(ready.set)
        with self._cond:
            if not self._cond.wait_for(lambda: len(self._sent) > count, timeout):
                self._permits = max(self._permits - 1, 0)
                raise TimeoutError(f"no gated frame was written in {timeout:g} s")
            return self._sent[count]


async def _first(*events: asyncio.Event) -> None:
    """Until one of ``events`` is set."""
    waits = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()


class _Pacing:
    """The scripted per-event delay, the gate of a gated reply, and the server's stop, which
    cuts any reply short."""

    def __init__(self, delay: float, stopping: asyncio.Event, gate: FrameGate | None) -> None:
        self._delay = delay
        self._stopping = stopping
        self._gate = gate

    async def pause(self) -> None:
        """Wait the delay, and the gate's permit; raise :class:`DroppedConnection` if the
        server stops meanwhile."""
        if self._delay > 0 and not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self._delay)
        if self._gate is not None:
            await self._gate.take(self._stopping)
        if self._stopping.is_set():
            raise DroppedConnection("server stopping")

    def sent(self, frame: bytes) -> None:
        """``frame`` was written (the gate tells the test)."""
        if self._gate is not None:
            self._gate.sent(frame)

    async def stall(self, receive: Receive) -> None:
        """Say nothing until the client leaves (return) or the server stops (raise)."""
        gone = asyncio.ensure_future(_disconnected(receive))
        stop = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait((gone, stop), return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
            stop.cancel()
        if self._stopping.is_set():
            raise DroppedConnection("server stopping")


def _raw_headers(content_type: str, extra: Iterable[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    headers = [("content-type", content_type), *extra]
    return [(name.encode(), value.encode()) for name, value in headers]


class _StreamReply:
    """Writes SSE frames one by one, then ends, errs, drops or stalls as scripted."""

    def __init__(
        self,
        script: ScriptedResponse,
        rendered: RenderedStream,
        pacing: _Pacing,
        *,
        status: int = 200,
        content_type: str = SSE_CONTENT_TYPE,
    ) -> None:
        self._script = script
        self._rendered = rendered
        self._pacing = pacing
        self._status = status
        self._content_type = content_type

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        script, frames = self._script, self._rendered.frames
        faults = (script.error_after, script.drop_after, script.stall_after)
        cut = next((n for n in faults if n is not None), None)
        sent = len(frames) if cut is None else min(cut, len(frames))
        extra = [("cache-control", "no-cache"), *self._rendered.headers]
        headers = _raw_headers(self._content_type, extra)
        await send({"type": "http.response.start", "status": self._status, "headers": headers})
        for frame in frames[:sent]:
            await self._pacing.pause()
            await send({"type": "http.response.body", "body": frame, "more_body": True})
            self._pacing.sent(frame)
        if script.stall_after is not None:
            await self._pacing.stall(receive)
            return
        if script.drop_after is not None:
            raise DroppedConnection(f"drop_after {script.drop_after}")
        tail = b""
        if script.error_after is not None:
            await self._pacing.pause()
            tail = self._rendered.error_frame(sent)
        await send({"type": "http.response.body", "body": tail, "more_body": False})
        if tail:
            self._pacing.sent(tail)
        if cut is None:
            self._rendered.on_complete()


class _ObjectReply:
    """Sends the ``stream: false`` JSON, or half of it (drop), or nothing (stall)."""

    def __init__(self, script: ScriptedResponse, rendered: RenderedObject, pacing: _Pacing) -> None:
        self._script = script
        self._rendered = rendered
        self._pacing = pacing

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._script.stall_after is not None:
            await self._pacing.stall(receive)
            return
        await self._pacing.pause()
        body = dumps(self._rendered.body).encode()
        extra = [*self._rendered.headers, ("content-length", str(len(body)))]
        headers = _raw_headers(JSON_CONTENT_TYPE, extra)
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        if self._script.drop_after is not None:
            half = body[: len(body) // 2]
            await send({"type": "http.response.body", "body": half, "more_body": True})
            raise DroppedConnection(f"drop_after {self._script.drop_after}")
        await send({"type": "http.response.body", "body": body, "more_body": False})
        self._pacing.sent(body)
        self._rendered.on_complete()


class _Hang:
    """Answers nothing at all — no status line — until the client leaves or the server stops."""

    def __init__(self, pacing: _Pacing) -> None:
        self._pacing = pacing

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._pacing.stall(receive)


class FakeLLMApp:
    """The ASGI app; ``stopping`` is set when the server shuts down (it ends stalled replies)."""

    def __init__(
        self, ledger: Ledger, stopping: asyncio.Event, gate: FrameGate | None = None
    ) -> None:
        self._ledger = ledger
        self._stopping = stopping
        self._gate = gate or FrameGate()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        protocol = _PATHS.get(scope["path"])
        reply: ASGIApp
        if protocol is None:
            reply = PlainTextResponse("Not Found", status_code=404)
        elif scope["method"] != "POST":
            reply = PlainTextResponse("Method Not Allowed", status_code=405)
        else:
            reply = await self._handle(protocol, Request(scope, receive))
        await reply(scope, receive, send)

    async def _handle(self, protocol: ProtocolName, request: Request) -> ASGIApp:
        raw = await request.body()
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = None
        body: dict[str, Any] = parsed if isinstance(parsed, dict) else {}
        path = request.url.path
        serial = self._ledger.record(RecordedRequest(protocol, path, dict(request.headers), body))
        wire = _WIRES[protocol]
        ctx = RenderContext(
            body=body,
            raw_size=len(raw),
            options=self._ledger.options,
            ids=self._ledger.ids,
            serial=serial,
        )
        if not isinstance(parsed, dict):
            message = "The request body is not a valid JSON object."
            self._ledger.violation(f"{protocol} request #{serial}: {message}")
            return _JsonReply(wire.invalid_request(message, ctx))
        problems: list[str]
        if protocol == "openai-responses":
            resolved = self._resolve_chain(body, ctx)
            if isinstance(resolved, Reply):
                return _JsonReply(resolved)
            ctx = resolved
            problems = validate.validate_responses(body, ctx.resolved_input)
        elif protocol == "anthropic":
            problems = validate.validate_anthropic(body)
        else:
            problems = validate.validate_chat(body)
        if problems:
            for problem in problems:
                self._ledger.violation(f"{protocol} request #{serial}: {problem}")
            return _JsonReply(wire.invalid_request(problems[0], ctx))
        script = self._ledger.pop()
        if script is None:
            self._ledger.unexpected(f"{protocol} request #{serial} (POST {path}): {NO_SCRIPT_LEFT}")
            message = f"{NO_SCRIPT_LEFT} (request #{serial}, POST {path})"
            return _JsonReply(wire.http_error(HttpError(status=500, message=message), ctx))
        if script.http_error is not None:
            return _JsonReply(wire.http_error(script.http_error, ctx))
        delay = script.delay if script.delay is not None else ctx.options.delay
        pacing = _Pacing(delay, self._stopping, self._gate if script.gate else None)
        if script.hang:
            return _Hang(pacing)
        overflow = script.context_overflow
        if overflow is not None:
            if protocol == "openai-responses" and overflow.mid_stream and body.get("stream"):
                rendered = openai_responses.context_overflow_stream(overflow, ctx)
                return _StreamReply(script, rendered, pacing)
            return _JsonReply(wire.context_overflow(overflow, ctx))
        if script.raw is not None:
            return self._raw_reply(script, script.raw, wire, ctx, pacing)
        if body.get("stream") is True:
            return _StreamReply(script, wire.render_stream(script, ctx), pacing)
        if script.error_after is not None:
            # Without a stream the failure can only be an error status.
            error = script.error or StreamError()
            status = status_for_error(error.type)
            spec = HttpError(status=status, type=error.type, message=error.message)
            return _JsonReply(wire.http_error(spec, ctx))
        return _ObjectReply(script, wire.render_object(script, ctx), pacing)

    @staticmethod
    def _raw_reply(
        script: ScriptedResponse, raw: RawReply, wire: _Wire, ctx: RenderContext, pacing: _Pacing
    ) -> ASGIApp:
        """Recorded bytes, frame by frame; ``error_after`` appends the protocol's error event."""

        def error_frame(sent: int) -> bytes:
            return wire.raw_error_frame(script.error, ctx, sent)

        rendered = RenderedStream(frames=split_frames(raw.body), error_frame=error_frame)
        return _StreamReply(
            script, rendered, pacing, status=raw.status, content_type=raw.content_type
        )

    def _resolve_chain(self, body: dict[str, Any], ctx: RenderContext) -> RenderContext | Reply:
        """Responses API: the stored input + output behind ``previous_response_id``."""
        history: list[Any] = []
        previous = body.get("previous_response_id")
        if previous is not None:
            stored = self._ledger.stored(str(previous)) if ctx.options.store_responses else None
            if stored is None:
                return openai_responses.previous_response_not_found(str(previous), ctx)
            history = stored
        resolved = [*history, *validate.responses_input(body)]
        keep = ctx.options.store_responses and body.get("store", True) is not False

        def remember(response_id: str, output: list[dict[str, Any]]) -> None:
            if keep:
                self._ledger.store(response_id, [*resolved, *output])

        return replace(ctx, remember=remember, resolved_input=resolved)
