"""The stdio transport of an MCP server: a child process in a process group of its own, ended
whole when the connection ends.

The MCP SDK's ``stdio_client`` starts the server in a new session too, but it signals the group
only when the server itself outlives the grace period after its stdin closes: a server that
exits at once leaves what it started (a worker, a language server, a browser) running forever,
one more set per restart. Here every stop ends the group, however the server behaves:

1. the streams stop and the server's stdin is closed (the MCP shutdown sequence);
2. the server gets :data:`GRACE` seconds to exit by itself;
3. whatever of its group still lives — the server, or what it left behind — gets ``SIGTERM``,
   then ``SIGKILL`` once :data:`GRACE` more seconds have passed.

A descendant that left the group on purpose (``setsid``, a daemon) is out of reach, as it is
of a terminal's job control. The whole stop is shielded from cancellation and bounded, so a
cancelled start or an agent closing never leaves the group behind nor waits forever. Messages
are one JSON-RPC object per line, as the SDK's transport reads and writes them.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import AsyncIterator, Callable
from typing import TextIO

import anyio
import mcp_types as types
from anyio.abc import Process
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from anyio.streams.text import TextReceiveStream
from mcp.shared.message import SessionMessage

from drover.mcp.launch import Launch

#: Seconds the server has to exit after its stdin closes, and its group after ``SIGTERM``.
GRACE = 2.0
#: Seconds to wait for the kernel to take the group away after ``SIGKILL`` (never long).
KILL_WAIT = 2.0
#: How often the group is looked at while it is given time to end.
_POLL = 0.02
#: Seconds the writer has to pass on what it was given before stdin closes.
_FLUSH = 0.5

Streams = tuple[
    MemoryObjectReceiveStream[SessionMessage | Exception],
    MemoryObjectSendStream[SessionMessage],
]


@contextlib.asynccontextmanager
async def stdio_transport(launch: Launch, errlog: TextIO) -> AsyncIterator[Streams]:
    """Start ``launch`` (its stderr to ``errlog``) and yield the SDK's streams of its messages;
    on exit, end its process group (see the module docstring)."""
    process = await anyio.open_process(
        [launch.command, *launch.args],
        env=launch.env,
        cwd=launch.cwd,
        stderr=errlog,
        start_new_session=True,  # its own session, so its own group: pgid == pid
    )
    # No await until the task group is entered: a cancellation there would leak the process.
    incoming, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, outgoing = anyio.create_memory_object_stream[SessionMessage](0)
    writer_done = anyio.Event()

    async def read_messages() -> None:
        assert process.stdout is not None
        lines = TextReceiveStream(process.stdout, encoding="utf-8", errors="replace")
        buffer = ""
        async with incoming:
            try:
                async for chunk in lines:
                    *complete, buffer = (buffer + chunk).split("\n")
                    for line in complete:
                        if line.strip():
                            await incoming.send(_parse(line))
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                pass  # the session went away, or the pipe broke: the session sees the end
        with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
            # Keep reading (and dropping): a server blocked writing cannot see its stdin close.
            async for _ in process.stdout:
                pass

    async def write_messages() -> None:
        assert process.stdin is not None
        try:
            async with outgoing:
                async for message in outgoing:
                    line = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send(line.encode() + b"\n")
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await incoming.aclose()  # the server may live on: let the session see the end
        finally:
            writer_done.set()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(read_messages)
        tasks.start_soon(write_messages)
        try:
            yield read_stream, write_stream
        finally:
            with anyio.CancelScope(shield=True):
                read_stream.close()
                write_stream.close()
                with anyio.move_on_after(_FLUSH):
                    await writer_done.wait()
                await stop(process)
                for stream in (read_stream, write_stream, incoming, outgoing):
                    await stream.aclose()
            tasks.cancel_scope.cancel()


def _parse(line: str) -> SessionMessage | Exception:
    """One line of the server's output (an error the session reports when it is no message)."""
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:
        return exc


async def stop(process: Process) -> None:
    """Close the server's stdin, give it :data:`GRACE` seconds, then end its whole group."""
    assert process.stdin is not None and process.stdout is not None
    with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await process.stdin.aclose()
    # (returncode, not wait(): wait() also waits for the pipes, which what the server left
    # behind may hold open)
    await _until(lambda: process.returncode is not None, GRACE)
    await end_group(process.pid, process)
    with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await process.stdout.aclose()


async def end_group(pgid: int, leader: Process | None = None) -> None:
    """``SIGTERM`` the process group ``pgid`` if anything of it lives, ``SIGKILL`` what is
    left after :data:`GRACE` seconds; returns once none of it runs (bounded)."""
    for sig, wait in ((signal.SIGTERM, GRACE), (signal.SIGKILL, KILL_WAIT)):
        if not group_alive(pgid, leader):
            return
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        except PermissionError:
            pass  # (a member that changed its user): the others were signalled
        await _until(lambda: not group_alive(pgid, leader), wait)


async def _until(done: Callable[[], bool], seconds: float) -> None:
    """Until ``done()`` or ``seconds`` have passed. Polled: nothing tells when a
    process group has emptied, nor (without waiting for its pipes) when a process exited."""
    with anyio.move_on_after(seconds):
        while not done():  # noqa: ASYNC110
            await anyio.sleep(_POLL)


def group_alive(pgid: int, leader: Process | None = None) -> bool:
    """Whether a process of the group ``pgid`` still runs (zombies do not count: nobody may
    reap an orphan where the init process does not)."""
    if leader is not None:
        _ = leader.returncode  # (reaps the leader once it exited, on some event loops)
    try:
        entries = os.listdir("/proc")
    except OSError:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        return True
    return any(entry.isdigit() and _member(entry, pgid) for entry in entries)


def _member(pid: str, pgid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            stat = file.read()
    except OSError:
        return False
    # "pid (comm) state ppid pgrp …": the name may hold anything, so split after its ")".
    fields = stat[stat.rfind(b")") + 2 :].split()
    return len(fields) > 2 and fields[2] == str(pgid).encode() and fields[0] not in (b"Z", b"X")
