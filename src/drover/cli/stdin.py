"""The one reader of standard input in a process that asks the user questions.

The REPL's prompt and a permission question both want the next line the user types. If each
read stdin on its own (a thread blocked in ``readline``), a question abandoned by Ctrl-C would
stay blocked and swallow the next line meant for the REPL. Instead, :class:`StdinLines` owns
the file descriptor: it reads only while someone awaits a line, without a thread (the event
loop watches the descriptor), so a cancelled wait leaves nothing blocked, and bytes already
read are kept for the next caller. One caller reads at a time; others queue in order.

A descriptor the event loop cannot watch (a regular file redirected to stdin) never blocks, so
it is read directly.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections import deque

_CHUNK = 65536


def stdin_is_terminal() -> bool:
    """Whether a person can answer questions on stdin (False when it is closed: ``<&-``)."""
    return sys.stdin is not None and sys.stdin.isatty()


class StdinLines:
    """Lines of a file descriptor (standard input by default), read on demand."""

    def __init__(self, fd: int = 0) -> None:
        self._fd = fd
        self._lines: deque[bytes] = deque()
        self._partial = b""
        self._eof = False
        self._lock = asyncio.Lock()

    async def readline(self) -> bytes | None:
        """The next line without its line ending, or None once the input has ended."""
        async with self._lock:
            while not self._lines and not self._eof:
                await self._wait_readable()
                self._read_chunk()
            if self._lines:
                return self._lines.popleft()
            return None

    def push_back(self, line: bytes) -> None:
        """Return a line taken but not used, so that the next reader gets it first."""
        self._lines.appendleft(line)

    async def _wait_readable(self) -> None:
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()

        def wake() -> None:
            if not ready.done():
                ready.set_result(None)

        try:
            loop.add_reader(self._fd, wake)
        except (PermissionError, ValueError, OSError):
            return  # a regular file: reading it cannot block
        try:
            await ready
        finally:
            loop.remove_reader(self._fd)

    def _read_chunk(self) -> None:
        try:
            chunk = os.read(self._fd, _CHUNK)
        except BlockingIOError:
            return  # another reader of the descriptor took the bytes first
        except OSError:
            chunk = b""  # EIO: the terminal went away
        if not chunk:
            self._eof = True
            if self._partial:
                self._lines.append(self._partial)
                self._partial = b""
            return
        *complete, self._partial = (self._partial + chunk).split(b"\n")
        self._lines.extend(line.removesuffix(b"\r") for line in complete)
