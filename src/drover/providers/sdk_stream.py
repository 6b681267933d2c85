"""Reading an SDK's event stream: a silent server as a clear error, and a deliberate close.

Both official SDKs parse a response through a chain of async generators (the stream's
``__stream__`` → its SSE event iterator → the SSE decoder → httpx's ``aiter_bytes`` →
``aiter_raw`` → the connection's body iterator). Iterating with ``async for`` never closes
the inner links: when a link raises — the SDK raising an ``error`` event, or a provider
raising on a ``response.failed`` event it was handed — the links below it stay suspended,
held by the frames of the exception's traceback, usually in a reference cycle. Whoever then
collects that cycle finalises the generators; from another thread (a server in the same
process) that fails with ``async generator already executing``. So every exit of a provider's
attempt goes through :meth:`SdkStream.aclose`, which closes each suspended link, outermost
first, on the stream's own event loop.

The links are found by following what each suspended generator's frame holds (its locals and
its value stack, where ``async for`` keeps its iterator) with :func:`gc.get_referents`,
starting from the generator this module iterates and from the frames of the exception that
ended it. Only async generators are followed, and never drover's own (they are the callers,
and still running).

A provider may read the body itself (:class:`RawEvents`: the SDK sends the request, checks
the status and builds its stream object; drover decodes the bytes with
:mod:`drover.providers.sse` and ``orjson`` instead of building the SDK's per-event models).
Closing it closes httpx's suspended body iterators the same way, then the SDK's stream.

The stall timeout is the transport's: :func:`transport_timeout` makes it httpx's connect and
read timeout, so it bounds every wait for bytes — for the connection, for the status line,
and between any two pieces of the body. Counting bytes rather than parsed events lets the
keep-alive ``ping`` events a server sends while a model works (which the SDKs swallow) count
as signs of life. A wait that runs out fails the attempt after ``stall_timeout`` seconds with
a retryable error, instead of holding the turn for the SDK's ten-minute default.
"""

from __future__ import annotations

import gc
import types
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import httpx2

from drover.config.settings import DEFAULT_STALL_TIMEOUT as DEFAULT_STALL_TIMEOUT
from drover.errors import ProviderConnectionError, ProviderError, StreamError
from drover.providers.sse import SseDecoder, SseEvent

T = TypeVar("T")
E = TypeVar("E", bound=BaseException)
T_co = TypeVar("T_co", covariant=True)

#: drover's own source directory, as code objects may name it (resolved or not).
_DROVER = (str(Path(__file__).parent.parent), str(Path(__file__).resolve().parent.parent))
#: How many links deep the search goes (the real chains are about ten long).
_MAX_LINKS = 64


class ClosableStream(Protocol[T_co]):
    """What the SDKs' ``AsyncStream`` offers: iteration, and ``close()`` for the response."""

    def __aiter__(self) -> AsyncIterator[T_co]: ...

    async def close(self) -> None: ...


def stall_error(api: str, seconds: float, *, started: bool) -> ProviderError:
    """The retryable error of a wait that saw no data for ``seconds``."""
    message = f"no data from {api} for {seconds:g} s: the stream stalled"
    if started:
        return StreamError(message, error_type="stalled", retryable=True)
    return ProviderConnectionError(message)


def transport_timeout(total: float, stall_timeout: float) -> httpx2.Timeout:
    """httpx's timeouts for an SDK client: ``stall_timeout`` for connecting and for each read,
    ``total`` for writing the request and waiting for a pooled connection."""
    return httpx2.Timeout(total, connect=min(total, stall_timeout), read=stall_timeout)


def wrapped(exc: BaseException, kind: type[E] | types.UnionType) -> E | None:
    """The first exception of ``kind`` that ``exc`` is or wraps (its cause, else its context,
    as the SDKs and the clients chain theirs), if any."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, kind):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def _timeout_in(exc: BaseException) -> httpx2.TimeoutException | None:
    """The connect or read timeout ``exc`` is or wraps, if any."""
    timeout: httpx2.TimeoutException | None = wrapped(
        exc, httpx2.ReadTimeout | httpx2.ConnectTimeout
    )
    return timeout


def misnamed_timeout(exc: BaseException) -> BaseException | None:
    """The aiohttp error behind a "timeout" in ``exc`` that was none: the OpenAI SDK's aiohttp
    transport maps every ``aiohttp.ClientConnectionError`` — a refused connection, a server
    that hung up — to httpx's ``ConnectTimeout``. A real timeout's cause is a
    ``TimeoutError``, or httpx's own transport's."""
    timeout = _timeout_in(exc)
    cause = None if timeout is None else timeout.__cause__
    if cause is None or isinstance(cause, TimeoutError):
        return None
    return cause if type(cause).__module__.startswith("aiohttp") else None


def stalled(exc: BaseException) -> bool:
    """Whether ``exc`` is (or wraps, as the SDKs do) a connect or read timeout."""
    return _timeout_in(exc) is not None and misnamed_timeout(exc) is None


async def stall_guard(opening: Awaitable[T], seconds: float, api: str) -> T:
    """``await opening`` (the request that opens a stream); a timeout becomes the stall error."""
    try:
        return await opening
    except Exception as exc:
        if stalled(exc):
            raise stall_error(api, seconds, started=False) from exc
        raise


class SdkStream(Generic[T]):
    """One SDK stream, read event by event; close it with :meth:`aclose`.

    Use it as ``async with SdkStream(...) as stream: while (event := await stream.next()) …``:
    leaving the block, by any path, closes the stream and every generator of its chain.
    """

    def __init__(self, stream: ClosableStream[T], *, stall_timeout: float, api: str) -> None:
        self._stream = stream
        self._events = aiter(stream)
        self._stall_timeout = stall_timeout
        self._api = api
        self._delivered = False
        #: The exception that ended the SDK's iteration, whose frames hold the chain.
        self._error: BaseException | None = None

    async def __aenter__(self) -> SdkStream[T]:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def next(self) -> T | None:
        """The next event, or None at the end of the stream; a timeout becomes the stall error."""
        try:
            event = await anext(self._events)
        except StopAsyncIteration:
            return None
        except BaseException as exc:
            self._error = exc
            if stalled(exc):
                raise stall_error(self._api, self._stall_timeout, started=self._delivered) from exc
            raise
        self._delivered = True
        return event

    async def aclose(self) -> None:
        """Close every suspended generator of the chain, outermost first, then the response.

        A cancellation that arrives meanwhile does not stop the closing; it is re-raised after.
        """
        roots: list[object] = [self._events]
        if self._error is not None:
            roots += _frames(self._error)
        self._error = None
        interrupted: BaseException | None = None
        for generator in suspended_chain(roots):
            try:
                await generator.aclose()
            except BaseException as exc:  # keep closing the rest first
                if not isinstance(exc, Exception) and interrupted is None:
                    interrupted = exc
        try:
            await self._stream.close()
        except BaseException as exc:
            if not isinstance(exc, Exception) and interrupted is None:
                interrupted = exc
        if interrupted is not None:
            raise interrupted


def _frames(error: BaseException) -> list[types.FrameType]:
    """The frames of ``error``'s traceback and of the exceptions it was chained to."""
    frames: list[types.FrameType] = []
    seen: set[int] = set()
    pending: list[BaseException | None] = [error]
    while pending:
        exc = pending.pop()
        if exc is None or id(exc) in seen:
            continue
        seen.add(id(exc))
        tb = exc.__traceback__
        while tb is not None:
            frames.append(tb.tb_frame)
            tb = tb.tb_next
        pending += [exc.__cause__, exc.__context__]
    return frames


def _ours(generator: types.AsyncGeneratorType[Any, Any]) -> bool:
    return generator.ag_code.co_filename.startswith(_DROVER)


def suspended_chain(roots: Iterable[object]) -> list[types.AsyncGeneratorType[Any, Any]]:
    """The suspended, not running, foreign async generators reachable from ``roots`` (async
    generators or frames) through generator frames, in breadth-first order."""
    found: list[types.AsyncGeneratorType[Any, Any]] = []
    seen: set[int] = set()
    queue = list(roots)
    while queue and len(found) < _MAX_LINKS:
        item = queue.pop(0)
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, types.AsyncGeneratorType):
            if item.ag_frame is None or item.ag_running or _ours(item):
                continue
            found.append(item)
        elif not isinstance(item, types.FrameType):
            continue
        queue += [
            ref for ref in gc.get_referents(item) if isinstance(ref, types.AsyncGeneratorType)
        ]
    return found


class SdkResponse(Protocol):
    """What drover uses of an SDK's stream object: its HTTP response, and closing it."""

    @property
    def response(self) -> httpx2.Response: ...

    async def close(self) -> None: ...


class RawEvents:
    """An SDK stream read from its HTTP response's bytes, as the API's events in plain JSON.

    The SDK sent the request, checked the status and built the stream object; this reads the
    body with :class:`~drover.providers.sse.SseDecoder` and :func:`orjson.loads`, never
    building the SDK's per-event models. ``interpret`` turns each server-sent event into the
    event the provider's mapper takes, None to skip it, or raises the SDK's error for it.
    ``close`` closes httpx's body iterators, then the SDK's stream (which closes the response).
    """

    def __init__(
        self, stream: SdkResponse, interpret: Callable[[SseEvent, httpx2.Response], object]
    ) -> None:
        self._stream = stream
        self._response = stream.response
        self._chunks = stream.response.aiter_bytes()
        self._interpret = interpret
        self._decoder = SseDecoder()
        self._pending: deque[SseEvent] = deque()
        self._ended = False

    def __aiter__(self) -> RawEvents:
        return self

    async def __anext__(self) -> Any:
        pending = self._pending
        while True:
            while not pending:
                if self._ended:
                    raise StopAsyncIteration
                try:
                    chunk = await anext(self._chunks)
                except StopAsyncIteration:
                    self._ended = True  # an event the body left unfinished is discarded
                    continue
                pending.extend(self._decoder.feed(chunk))
            event = self._interpret(pending.popleft(), self._response)
            if event is not None:
                return event

    async def close(self) -> None:
        try:
            for generator in suspended_chain([self._chunks]):
                await generator.aclose()
        finally:
            # The SDK's stream made its own iterator, which drover never starts; it holds the
            # stream in a reference cycle, so it is closed here rather than by a collector.
            for value in tuple(getattr(self._stream, "__dict__", {}).values()):
                if isinstance(value, types.AsyncGeneratorType) and not value.ag_running:
                    await value.aclose()
            await self._stream.close()
