"""One MCP server as drover uses it: started when first needed, restarted after it failed.

The SDK's :class:`mcp.Client` must be entered and left by one task (its transport's task
groups belong to that task), so each start of a server gets an *owner* task that opens the
transport (a child process whose stderr is appended to a log file, or an HTTP client),
connects, lists the tools, and then holds the connection until it is told to let go. Calls
come from the turns' tool tasks and share it.

Nothing a server does can leave a call waiting forever or end a turn:

* a stdio server starts where :mod:`drover.mcp.launch` says (never in the workdir's code
  unasked), in a process group that ends whole with the connection (:mod:`drover.mcp.stdio`);
* a server that cannot start, or has not answered within ``startupTimeout``, fails the call
  that needed it with a :class:`~drover.errors.ToolError` quoting the end of its log; the next
  call tries again;
* a server that exits or drops the connection is noticed when its output ends: the connection
  is retired and the server started afresh on its next use; a call in flight then fails
  ("outcome unknown"), and so does one that lets ``timeout`` seconds pass without an answer or
  a progress notification (that call is cancelled first, and the server restarted next time);
* a call whose task is cancelled (the user interrupting the turn) sends the server the MCP
  ``notifications/cancelled`` for it before the cancellation goes on (the SDK does this,
  shielded and bounded), and the call ends as the loop records any interrupted call.

Progress notifications of a call reach the caller's ``progress`` function from the caller's own
task; when several arrive while it is busy, only the latest is delivered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeAlias

import anyio
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from drover.errors import ToolError
from drover.mcp.config import McpServerConfig
from drover.mcp.launch import launch_of
from drover.mcp.logs import ServerLog
from drover.mcp.stdio import stdio_transport

log = logging.getLogger(__name__)

Status: TypeAlias = Literal["not started", "starting", "ready", "failed", "closed", "stopped"]
#: ``(progress, total, message)`` of a call, awaited in the caller's task.
Progress = Callable[[float, float | None, str | None], Awaitable[None]]

#: Seconds the owner of a retired connection gets to close it before it is cancelled.
CLOSE_TIMEOUT = 10.0
_LIST_PAGES = 100


@dataclass(eq=False)
class _Generation:
    """One start of the server: its owner task and what it reached."""

    #: Resolves once the tools are listed; fails with why the start failed.
    ready: asyncio.Future[None]
    #: Resolves when the owner task ends, whatever ended it.
    gone: asyncio.Future[None]
    task: asyncio.Task[None] | None = None
    client: Client | None = None
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    timed_out: bool = False


class _Latest:
    """The latest progress of a call, and a future that resolves when one arrives."""

    def __init__(self) -> None:
        self.update: tuple[float, float | None, str | None] | None = None
        self.arrived: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.update = (progress, total, message)
        if not self.arrived.done():
            self.arrived.set_result(None)

    def take(self) -> tuple[float, float | None, str | None] | None:
        update, self.update = self.update, None
        self.arrived = asyncio.get_running_loop().create_future()
        return update


class McpConnection:
    """The client of one configured server (see the module docstring)."""

    def __init__(
        self, config: McpServerConfig, *, workdir: Path, log_dir: Path, version: str = ""
    ) -> None:
        self.config = config
        self.workdir = workdir
        self.log = ServerLog(log_dir, config.name)
        self.version = version
        self.status: Status = "not started"
        #: Why the server failed or closed (for ``drover mcp list`` and the log), scrubbed.
        self.detail = ""
        #: The tools listed at the last start.
        self.tools: list[types.Tool] = []
        self.starts = 0
        self._gen: _Generation | None = None
        self._lock = asyncio.Lock()
        self._closing = False

    @property
    def name(self) -> str:
        return self.config.name

    # -- starting ------------------------------------------------------------------------------

    async def client(self) -> tuple[Client, _Generation]:
        """The live client, starting (or restarting) the server when it is not running."""
        if self.config.error is not None:
            raise ToolError(f"MCP server '{self.name}' is not started: {self.config.error}")
        async with self._lock:
            gen = self._gen
            if gen is None or gen.stop.is_set() or gen.gone.done():
                if gen is not None:
                    await self._release(gen)
                if self._closing:
                    raise self._stopped()
                gen = self._gen = self._spawn()
        # Shielded: a caller that goes away leaves the start to finish for the next one (the
        # owner enforces the startup timeout itself).
        await asyncio.shield(gen.ready)
        assert gen.client is not None
        return gen.client, gen

    async def start(self) -> None:
        """Start the server now, if it is not running (raises why it cannot)."""
        await self.client()

    def _spawn(self) -> _Generation:
        loop = asyncio.get_running_loop()
        gen = _Generation(ready=loop.create_future(), gone=loop.create_future())
        gen.ready.add_done_callback(_retrieve)
        self.status = "starting"
        self.starts += 1
        gen.task = loop.create_task(self._own(gen), name=f"mcp server {self.name}")
        gen.task.add_done_callback(self._owner_done)
        return gen

    def _owner_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("MCP server %r: its connection ended with %r", self.name, task.exception())

    async def _own(self, gen: _Generation) -> None:
        """The owner task of one start: connect, list the tools, hold on until stopped."""
        loop = asyncio.get_running_loop()
        timer = loop.call_later(self.config.startup_timeout, self._startup_timed_out, gen)
        try:
            async with contextlib.AsyncExitStack() as stack:
                transport = _watched(await self._transport(stack), lambda: self._lost(gen))
                client = await stack.enter_async_context(
                    Client(
                        transport,
                        client_info=types.Implementation(name="drover", version=self.version),
                    )
                )
                tools = await _list_tools(client)
                timer.cancel()
                gen.client, self.tools = client, tools
                self.status, self.detail = "ready", ""
                gen.ready.set_result(None)
                self.log.note(f"ready: {len(tools)} tools")
                await gen.stop.wait()
        except asyncio.CancelledError:
            if gen.timed_out:
                self._ended(gen, f"did not start within {self.config.startup_timeout:g} s")
            else:
                self._ended(gen, "stopped")
        except Exception as exc:
            self._ended(gen, _describe(exc))
        else:
            self._ended(gen, "stopped")
        finally:
            timer.cancel()
            gen.client = None
            if not gen.ready.done():  # (ended by something not caught above)
                self._ended(gen, "the start was cut short")
            gen.gone.set_result(None)

    def _stopped(self) -> ToolError:
        return ToolError(f"MCP server '{self.name}' is stopped: the agent is closing")

    def _lost(self, gen: _Generation) -> None:
        """The server's output ended: it exited or dropped the connection."""
        if gen.ready.done() and not gen.stop.is_set() and not self._closing:
            self.retire(gen, "the server exited or closed the connection")

    def _startup_timed_out(self, gen: _Generation) -> None:
        if not gen.ready.done() and gen.task is not None:
            gen.timed_out = True
            gen.task.cancel()

    def _ended(self, gen: _Generation, why: str) -> None:
        why = self.config.scrub(why)
        if gen is not self._gen and gen.ready.done():
            return  # an older start, replaced: the status is the newer one's
        if self._closing:
            self.status, self.detail = "stopped", ""
            self.log.note("stopped")
            if not gen.ready.done():
                gen.ready.set_exception(self._stopped())
        elif not gen.ready.done():
            self.status, self.detail = "failed", why
            self.log.note(f"failed to start: {why}")
            tail = self.log.tail()
            quoted = f"; its log ends with:\n{self.config.scrub(tail)}" if tail else ""
            gen.ready.set_exception(
                ToolError(
                    f"MCP server '{self.name}' could not start: {why} (log: {self.log.path})"
                    + quoted
                )
            )
        elif not gen.stop.is_set():  # (a retired one: retire() said why)
            self.status, self.detail = "closed", why
            self.log.note(f"connection ended: {why}")

    async def _transport(self, stack: contextlib.AsyncExitStack) -> Any:
        config = self.config
        if config.transport == "stdio":
            launch = launch_of(config, self.workdir)
            header = f"start {self.starts}: {config.display} (in {launch.cwd})"
            errlog = stack.enter_context(self.log.open(header))
            return stdio_transport(launch, errlog)
        self.log.begin(f"start {self.starts}: {config.display}")
        http = await stack.enter_async_context(
            httpx2.AsyncClient(
                headers=dict(config.headers), timeout=httpx2.Timeout(30.0, read=300.0)
            )
        )
        return streamable_http_client(config.url, http_client=http)

    # -- stopping ------------------------------------------------------------------------------

    def retire(self, gen: _Generation, why: str) -> None:
        """Let go of a connection that failed; the next call starts the server afresh."""
        if gen.stop.is_set():
            return
        self.status, self.detail = "closed", self.config.scrub(why)
        self.log.note(f"retired: {self.detail}")
        gen.stop.set()

    async def _release(self, gen: _Generation) -> None:
        """Stop ``gen``'s owner and wait until it has closed the connection (bounded)."""
        gen.stop.set()
        task = gen.task
        if task is None or task.done():
            return
        if not gen.ready.done():
            task.cancel()  # a start nobody waits for any more is abandoned at once
        done, _ = await asyncio.wait({task}, timeout=CLOSE_TIMEOUT)
        if not done:
            task.cancel()
            await asyncio.wait({task})

    async def aclose(self) -> None:
        """Stop the server (the agent is closing); calls that come later fail."""
        self._closing = True
        async with self._lock:  # (a start under way finishes first, and is stopped below)
            gen, self._gen = self._gen, None
        if gen is not None:
            await self._release(gen)
            self.status = "stopped" if self.status != "failed" else self.status

    # -- calls ---------------------------------------------------------------------------------

    async def call(
        self, tool: str, arguments: Mapping[str, Any], *, progress: Progress | None = None
    ) -> types.CallToolResult:
        """Call ``tool``; raises :class:`~drover.errors.ToolError` for every failure (module
        docstring). Cancelling the caller cancels the call on the server."""
        client, gen = await self.client()
        latest = _Latest()
        call = asyncio.ensure_future(
            client.call_tool(tool, dict(arguments), progress_callback=latest)
        )
        try:
            await self._follow(call, gen, latest, progress)
        except TimeoutError:
            timeout = self.config.timeout
            self.retire(gen, f"a call of {tool} got no answer for {timeout:g} s")
            raise ToolError(
                f"MCP server '{self.name}' did not answer the call of {tool} within "
                f"{timeout:g} s (no result and no progress): the call was cancelled and may "
                "have had effects; the server is restarted on its next use"
            ) from None
        except _Gone:
            raise self._failure(tool, gen, None) from None
        finally:
            if not call.done():
                # Cancelled here: the SDK sends the server notifications/cancelled (shielded,
                # bounded) before the call task ends.
                call.cancel()
                await asyncio.wait({call})
            if not call.cancelled():
                call.exception()  # retrieved (raised below unless superseded)
        if call.cancelled():  # not by this task: the connection was torn down under it
            raise self._failure(tool, gen, None)
        try:
            return call.result()
        except ValidationError as exc:
            first = str(exc).splitlines()[0]
            raise ToolError(
                f"MCP server '{self.name}' answered the call of {tool} with an invalid result: "
                f"{self.config.scrub(first)}"
            ) from None
        except Exception as exc:
            raise self._failure(tool, gen, exc) from None

    async def _follow(
        self,
        call: asyncio.Future[types.CallToolResult],
        gen: _Generation,
        latest: _Latest,
        progress: Progress | None,
    ) -> None:
        """Until ``call`` is done, passing its progress on; raises :class:`TimeoutError` after
        ``timeout`` seconds without an answer or progress, :class:`_Gone` when the connection's
        owner ended."""
        timeout = self.config.timeout
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(timeout) as deadline:
            while not call.done():
                waiting: set[asyncio.Future[Any]] = {call, gen.gone, latest.arrived}
                await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                if call.done():
                    return
                if gen.gone.done():
                    raise _Gone()
                update = latest.take()
                deadline.reschedule(loop.time() + timeout)
                if update is not None and progress is not None:
                    await progress(*update)

    def _failure(self, tool: str, gen: _Generation, exc: BaseException | None) -> ToolError:
        if isinstance(exc, MCPError) and exc.code != types.CONNECTION_CLOSED:
            message = self.config.scrub(exc.error.message)
            return ToolError(f"MCP server '{self.name}' refused the call of {tool}: {message}")
        why = (
            "the connection closed" if exc is None or isinstance(exc, MCPError) else _describe(exc)
        )
        self.retire(gen, f"{why} during a call of {tool}")
        return ToolError(
            f"MCP server '{self.name}' failed during the call of {tool} ({self.config.scrub(why)}:"
            " it exited, crashed or dropped the connection); the call's outcome is unknown. "
            f"The server is restarted on its next use (log: {self.log.path})"
        )


@contextlib.asynccontextmanager
async def _watched(transport: Any, on_end: Callable[[], None]) -> AsyncIterator[Any]:
    """``transport`` whose read stream calls ``on_end`` when it ends."""
    async with transport as (read, write):
        yield _Reader(read, on_end), write


class _Reader:
    """A transport's read stream (the SDK's ``ReadStream``) that reports its end."""

    def __init__(self, stream: Any, on_end: Callable[[], None]) -> None:
        self._stream = stream
        self._on_end = on_end

    async def receive(self) -> Any:
        try:
            return await self._stream.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._on_end()
            raise

    async def aclose(self) -> None:
        await self._stream.aclose()

    def __aiter__(self) -> _Reader:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> _Reader:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class _Gone(Exception):
    """The owner of the connection ended while a call waited."""


def _retrieve(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()


async def _list_tools(client: Client) -> list[types.Tool]:
    tools: list[types.Tool] = []
    cursor: str | None = None
    for _ in range(_LIST_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools += page.tools
        cursor = page.next_cursor
        if not cursor:
            break
    return tools


def _describe(exc: BaseException) -> str:
    """One line saying what went wrong (the first leaf of an exception group)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, MCPError):
        return exc.error.message
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
