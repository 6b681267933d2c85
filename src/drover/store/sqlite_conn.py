"""The SQLite journal's connection: one worker thread that owns it, shielded calls.

All sqlite3 work of one store runs in ONE dedicated worker thread that owns the connection, so
calls are serialised and the event loop never blocks. Each call is shielded: a write that has
started completes even if the awaiting task is cancelled (the user pressed Esc), and later calls
queue behind it in order. The database runs in WAL mode with ``synchronous=NORMAL`` (a commit
survives a process crash; a power cut may lose the last few), a busy timeout and foreign keys
on; every write is one short ``BEGIN IMMEDIATE`` transaction.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from drover.errors import StoreError
from drover.store.migrations import migrate

if TYPE_CHECKING:
    # Imported where used: the commands that only read the journal (drover sessions, drover
    # show) drive it on their own thread and never load asyncio or concurrent.futures.
    import asyncio
    from concurrent.futures import Future, ThreadPoolExecutor

T = TypeVar("T")
Conn = sqlite3.Connection

#: The page size of a new journal. A text flush at a typical 320 B/s carries ~80 bytes and
#: costs at least one WAL frame (a page + 24 bytes): ~52x its text at SQLite's default 4 KiB,
#: ~13x at 1 KiB. Reads of big rows pay a little more (more overflow pages per message).
PAGE_SIZE = 1024
#: Bytes the WAL file is truncated to after a checkpoint (see ``journal_size_limit``).
WAL_SIZE_LIMIT = 4 * 1024 * 1024
WRITE = "BEGIN IMMEDIATE"


def _retrieve(future: asyncio.Future[Any] | Future[Any]) -> None:
    """Mark a shielded call's outcome as seen (its caller may have been cancelled)."""
    if not future.cancelled():
        future.exception()


class SqliteConnection:
    """One SQLite connection owned by one worker thread (see the module docstring)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        clock: Callable[[], float] = time.time,
        busy_timeout_ms: int = 5000,
    ) -> None:
        self.path = str(path)
        self._clock = clock
        self._busy_timeout_ms = busy_timeout_ms
        self._executor: ThreadPoolExecutor | None = None
        self._conn: Conn | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    async def open(self) -> None:
        if self._executor is not None:
            return
        import asyncio
        from concurrent.futures import ThreadPoolExecutor

        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="drover-sqlite")
        try:
            await asyncio.get_running_loop().run_in_executor(executor, self._connect)
        except BaseException:
            executor.shutdown(wait=False)
            raise
        self._executor = executor

    async def close(self) -> None:
        executor, self._executor = self._executor, None
        if executor is None:
            return
        import asyncio

        try:
            future = asyncio.get_running_loop().run_in_executor(executor, self._disconnect)
            await asyncio.shield(future)
        finally:
            executor.shutdown(wait=False)

    def _connect(self) -> None:
        where = self.path
        conn: Conn | None = None
        try:
            if where != ":memory:":
                Path(where).expanduser().parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(
                where, timeout=self._busy_timeout_ms / 1000, isolation_level=None
            )
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}")
            # Both take effect only in a new file (before its first table). Small pages: a
            # flush of streamed text appends one row, and SQLite writes each page it changes
            # whole to the WAL, so a page is the least a flush costs (see PAGE_SIZE). And the
            # pages a finished step's text rows leave free go back to the file system (the
            # store's ``reclaim``) instead of staying in the file until reused.
            conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
            conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
            self._enable_wal(conn)
            conn.execute("PRAGMA synchronous = NORMAL")
            # A checkpoint truncates the WAL back to this size instead of leaving it as large
            # as the biggest transaction ever made (a final message of a long answer).
            conn.execute(f"PRAGMA journal_size_limit = {WAL_SIZE_LIMIT}")
            conn.execute("PRAGMA foreign_keys = ON")
            migrate(conn, self._clock())
        except (OSError, sqlite3.Error) as exc:
            if conn is not None:
                conn.close()
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise StoreError(f"cannot open the journal at {where}: {reason}") from None
        self._conn = conn

    def _enable_wal(self, conn: Conn) -> None:
        # Switching a new file to WAL needs an exclusive lock and SQLite does not call the busy
        # handler for it, so processes opening a new journal together retry here. WAL mode is
        # stored in the file: later opens find it set.
        if self.path == ":memory:":
            return
        deadline = time.monotonic() + self._busy_timeout_ms / 1000
        while conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            try:
                conn.execute("PRAGMA journal_mode = WAL").fetchone()
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.005)

    def _disconnect(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    # -- plumbing ------------------------------------------------------------------------------

    async def _call(self, fn: Callable[[Conn], T]) -> T:
        executor = self._executor
        if executor is None:
            raise StoreError("the journal is not open")
        import asyncio

        future = asyncio.get_running_loop().run_in_executor(executor, self._run, fn)
        future.add_done_callback(_retrieve)
        return await asyncio.shield(future)

    def _run(self, fn: Callable[[Conn], T]) -> T:
        conn = self._conn
        if conn is None:
            raise StoreError("the journal is not open")
        try:
            return fn(conn)
        except sqlite3.Error as exc:
            raise StoreError(f"journal error: {exc}") from exc

    @staticmethod
    def _tx(conn: Conn, fn: Callable[[Conn], T], begin: str) -> T:
        conn.execute(begin)
        try:
            result = fn(conn)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return result
