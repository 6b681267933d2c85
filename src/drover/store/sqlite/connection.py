"""The SQLite journal's connections: a worker thread's, and a write path that never waits.

Reads and anything that may wait run in ONE dedicated worker thread that owns the main
connection, so they are serialised and the event loop never blocks. Each such call is shielded:
one that has started completes even if the awaiting task is cancelled (the user pressed Esc),
and later calls queue behind it in order.

A write transaction is short (a few rows) and, in WAL mode with ``synchronous=NORMAL``, makes no
fsync: handing it to the worker costs more than making it (two thread switches and the GIL
passed back and forth, for each of a tool step's three commits). So a write runs **here**, on
the calling thread, on a second connection, when nothing can make it wait:

* nothing is queued on the worker (a write never overtakes a call made before it);
* its ``BEGIN IMMEDIATE`` gets the write lock at once: the second connection has no busy
  timeout, and when another connection or process holds the lock the write, not yet started, goes
  to the worker, which waits for the lock as every write did before;
* it never checkpoints (``wal_autocheckpoint = 0``): every :data:`CHECKPOINT_EVERY` commits made
  here, or when the WAL file outgrows :data:`WAL_SIZE_LIMIT`, the worker checkpoints (the
  checkpoint is what fsyncs), and the writes asked for meanwhile queue behind it there.

A write made here runs to its end without an await, so a cancellation cannot cut it: it lands at
the caller's next await, after the commit, as it would after a shielded call. The database runs
in WAL mode with ``synchronous=NORMAL`` (a commit survives a process crash; a power cut may lose
the last few) and foreign keys on; every write is one short ``BEGIN IMMEDIATE`` transaction.

The journal is private (:mod:`drover.config.private`): a new file is created with mode 600 whatever
the umask (SQLite gives its ``-wal`` and ``-shm`` files the database's mode), and drover's own
data directory, made here on first use, has mode 700. The journal in that directory — drover's
own — is tightened to 600 (with its ``-wal`` and ``-shm``) when it is found readable by others;
one opened elsewhere (``--db PATH``) keeps the mode it has.
"""

from __future__ import annotations

import _thread
import functools
import itertools
import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from drover.config.private import private_dir, private_file, tighten
from drover.errors import StoreError
from drover.store.migrations.steps import migrate
from drover.store.sql.dialect import SQLITE
from drover.store.sql.plan import Atomic, Exec, Mode, Plan, Query

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
#: A snapshot: one read transaction (deferred: it takes no write lock).
READ = "BEGIN"
#: Commits made on the calling thread after which the worker checkpoints the WAL. A tool step
#: commits ~3 transactions of a few 1 KiB pages each: ~100 commits are a few hundred pages, as
#: SQLite's own automatic checkpoint (every 1000 pages) would do.
CHECKPOINT_EVERY = 100


def _retrieve(future: asyncio.Future[Any] | Future[Any]) -> None:
    """Mark a shielded call's outcome as seen (its caller may have been cancelled)."""
    if not future.cancelled():
        future.exception()


class SqliteConnection:
    """A SQLite journal's two connections: its worker thread's, and the one writes are made on
    from the calling thread when nothing makes them wait (see the module docstring)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        clock: Callable[[], float] = time.time,
        busy_timeout_ms: int = 5000,
        create_parent: bool = False,
    ) -> None:
        self.path = str(path)
        self._create_parent = create_parent
        self._clock = clock
        self._busy_timeout_ms = busy_timeout_ms
        self._executor: ThreadPoolExecutor | None = None
        self._conn: Conn | None = None
        # The connection writes run on here (None: every call goes to the worker).
        self._here: Conn | None = None
        # (``_thread``'s lock: the commands that only read load neither threading nor logging)
        self._here_lock = _thread.allocate_lock()
        # Calls handed to the worker, and those it finished: each counter is advanced by one
        # thread only (``next`` on a count is atomic), so their difference is what is queued.
        self._sends, self._dones = itertools.count(1), itertools.count(1)
        self._sent = self._done = 0
        self._commits_here = 0

    # -- lifecycle -----------------------------------------------------------------------------

    async def open(self) -> None:
        if self._executor is not None:
            return
        import asyncio
        from concurrent.futures import ThreadPoolExecutor

        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="drover-sqlite")
        try:
            await asyncio.get_running_loop().run_in_executor(executor, self._connect_both)
        except BaseException:
            executor.shutdown(wait=False)
            raise
        self._executor = executor

    async def close(self) -> None:
        executor, self._executor = self._executor, None
        if executor is None:
            return
        with self._here_lock:  # no write starts here from now on
            here, self._here = self._here, None
        import asyncio

        try:
            future = asyncio.get_running_loop().run_in_executor(executor, self._disconnect, here)
            await asyncio.shield(future)
        finally:
            executor.shutdown(wait=False)

    def _connect(self) -> None:
        where = self.path
        conn: Conn | None = None
        try:
            if where != ":memory:":
                self._make_private(Path(where).expanduser())
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
            try:
                migrate(conn, self._clock())
            except StoreError as exc:  # a newer drover's schema
                conn.close()
                raise StoreError(f"cannot open the journal at {where}: {exc}") from None
        except (OSError, sqlite3.Error) as exc:
            if conn is not None:
                conn.close()
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise StoreError(f"cannot open the journal at {where}: {reason}") from None

        self._conn = conn

    def _make_private(self, path: Path) -> None:
        """Make the journal's file (and drover's own directory) before SQLite opens it, so
        that nobody else may ever read it (see the module docstring)."""
        # Only drover's own data directory is made: a mistyped --db names a directory that
        # does not exist, and creating it would hide the typo behind an empty journal.
        if self._create_parent:
            private_dir(path.parent)
            for own in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
                tighten(own)
        elif not path.parent.is_dir():
            raise StoreError(
                f"cannot open the journal at {self.path}: no such directory {path.parent}"
            )
        private_file(path)

    def _connect_both(self) -> None:
        self._connect()
        if self.path == ":memory:":
            return  # a second connection would open another, empty database
        try:
            here = sqlite3.connect(
                self.path, timeout=0, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            self._disconnect()
            raise StoreError(f"cannot open the journal at {self.path}: {exc}") from None
        here.row_factory = sqlite3.Row
        # Never wait for a lock, never checkpoint: see the module docstring.
        for pragma in ("busy_timeout = 0", "synchronous = NORMAL", "wal_autocheckpoint = 0"):
            here.execute(f"PRAGMA {pragma}")
        here.execute(f"PRAGMA journal_size_limit = {WAL_SIZE_LIMIT}")
        here.execute("PRAGMA foreign_keys = ON")
        self._here = here

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

    def _disconnect(self, here: Conn | None = None) -> None:
        if here is not None:
            here.close()
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()  # the last connection checkpoints the WAL and deletes it

    # -- plans ---------------------------------------------------------------------------------

    async def perform(self, plan: Plan[T], mode: Mode) -> T:
        """Run ``plan`` in ``mode``: reads on the worker thread, writes on the calling thread
        when nothing makes them wait and on the worker otherwise; a write of many bytes
        (``bulk``: a long answer's message) always on the worker."""
        if mode == "write":
            return await self._write(lambda conn: self._drive(conn, plan))
        if mode == "bulk":  # long on any thread: never the caller's
            return await self._hop(
                lambda conn: self._tx(conn, lambda c: self._drive(c, plan), WRITE)
            )
        if mode == "snapshot":
            return await self._call(
                lambda conn: self._tx(conn, lambda c: self._drive(c, plan), READ)
            )
        return await self._call(lambda conn: self._drive(conn, plan))

    def _drive(self, conn: Conn, plan: Plan[T]) -> T:
        """Run ``plan`` to its end on ``conn``, on this thread (one cursor for all its
        statements: this runs for every statement)."""
        cursor = conn.cursor()
        spell = SQLITE.sql
        send = plan.send
        result: Any = None
        try:
            while True:
                op = send(result)
                if type(op) is Exec:
                    cursor.execute(spell(op.sql), op.params)
                    result = cursor.rowcount
                elif type(op) is Query:
                    cursor.execute(spell(op.sql), op.params)
                    result = cursor.fetchall()
                elif type(op) is Atomic:
                    result = self._tx(conn, functools.partial(self._drive, plan=op.plan), WRITE)
                else:
                    raise TypeError(f"not a statement: {op!r}")
        except StopIteration as stop:
            value: T = stop.value
            return value
        finally:
            cursor.close()

    # -- plumbing ------------------------------------------------------------------------------

    async def _call(self, fn: Callable[[Conn], T]) -> T:
        """``fn`` run on the worker's connection (see :meth:`_hop`)."""
        return await self._hop(fn)

    async def _write(self, fn: Callable[[Conn], T]) -> T:
        """``fn`` run in one write transaction: here when nothing makes it wait, else on the
        worker (see the module docstring)."""
        here = self._here
        if here is not None and self._sent == self._done and self._here_lock.acquire(False):
            try:
                if self._here is here and self._begin_here(here):
                    return self._finish_here(here, fn)
            finally:
                self._here_lock.release()
        return await self._hop(lambda conn: self._tx(conn, fn, WRITE))

    async def _hop(self, fn: Callable[[Conn], T]) -> T:
        """``fn`` run on the worker's thread and connection, shielded."""
        executor = self._executor
        if executor is None:
            raise StoreError("the journal is not open")
        import asyncio

        self._sent = next(self._sends)
        try:
            future = asyncio.get_running_loop().run_in_executor(executor, self._run_queued, fn)
        except BaseException:
            self._done = next(self._dones)
            raise
        future.add_done_callback(_retrieve)
        return await asyncio.shield(future)

    def _run_queued(self, fn: Callable[[Conn], T]) -> T:
        try:
            return self._run(fn)
        finally:
            self._done = next(self._dones)

    def _run(self, fn: Callable[[Conn], T]) -> T:
        conn = self._conn
        if conn is None:
            raise StoreError("the journal is not open")
        try:
            return fn(conn)
        except sqlite3.Error as exc:
            raise StoreError(f"journal error: {exc}") from exc

    def _begin_here(self, here: Conn) -> bool:
        """Whether the write lock was had at once (if not, nothing of the write has run)."""
        try:
            here.execute(WRITE)
        except sqlite3.Error:
            return False  # busy, or any other trouble: the worker makes it and reports it
        return True

    def _finish_here(self, here: Conn, fn: Callable[[Conn], T]) -> T:
        try:
            result = self._commit(here, fn)
        except sqlite3.Error as exc:
            raise StoreError(f"journal error: {exc}") from exc
        self._commits_here = made = self._commits_here + 1
        # The WAL's size is looked at every few commits, for the rare transaction large
        # enough (a long answer's message) to make it outgrow its limit before the count does.
        if made >= CHECKPOINT_EVERY or (made % 8 == 0 and self._wal_size() > WAL_SIZE_LIMIT):
            self._checkpoint_soon()
        return result

    def _wal_size(self) -> int:
        try:
            return os.stat(self.path + "-wal").st_size
        except OSError:
            return 0

    def _checkpoint_soon(self) -> None:
        """Have the worker checkpoint the WAL (the writes made here never do). The checkpoint
        counts as queued: the writes asked for meanwhile go to the worker behind it, so it
        copies the whole WAL and the next write starts the WAL over from its beginning (with
        writes going on beside it, it would never catch up and the file would only grow)."""
        executor = self._executor
        if executor is None:
            return
        self._commits_here = 0
        self._sent = next(self._sends)
        try:
            executor.submit(self._run_queued, self._checkpoint)
        except RuntimeError:  # shut down meanwhile
            self._done = next(self._dones)

    @staticmethod
    def _checkpoint(conn: Conn) -> None:
        try:
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except sqlite3.Error as exc:
            import logging

            logging.getLogger(__name__).warning(
                "journal: checkpoint failed (%s); the next one will retry", exc
            )

    @staticmethod
    def _tx(conn: Conn, fn: Callable[[Conn], T], begin: str) -> T:
        conn.execute(begin)
        return SqliteConnection._commit(conn, fn)

    @staticmethod
    def _commit(conn: Conn, fn: Callable[[Conn], T]) -> T:
        """``fn`` run in the transaction begun on ``conn``, then committed (rolled back if it
        fails)."""
        try:
            result = fn(conn)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return result


class InlineSqliteConnection(SqliteConnection):
    """A SQLite journal's connection driven on the calling thread alone: no worker thread, no
    second connection, and no await that waits. For a command that makes one read after the
    other and answers in a new process each time (``drover sessions``, ``drover show``): its
    calls complete when first stepped, without an event loop. Opening it is the same
    ``_connect`` (the pragmas and every pending migration)."""

    async def open(self) -> None:
        if self._conn is None:
            self._connect()

    async def close(self) -> None:
        self._disconnect()

    async def _hop(self, fn: Callable[[Conn], T]) -> T:
        return self._run(fn)
