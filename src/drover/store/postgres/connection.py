"""Connections of the PostgreSQL journal: opening, one-line errors, calls that finish.

:class:`PgConnection` is the :class:`~drover.store.sql.plan.Connection` a
:class:`~drover.store.postgres.store.PostgresStore` runs its plans on, with psycopg 3's async API;
every write is one short transaction. :meth:`PgPool.open` parses the URL, connects once (so an
unreachable server gives a clear error and the schema is migrated before anything else runs),
then opens a :class:`psycopg_pool.AsyncConnectionPool` whose connections are checked before each
use (a server restart costs a reconnect, not a failed write). Every error becomes a one-line
:class:`~drover.errors.StoreError` that never shows the URL's password.

:meth:`PgPool.call` runs each call in a task of its own awaited through :func:`asyncio.shield`:
a write that has started completes, and commits, even if its caller is cancelled (the user
pressed Esc). The next call waits for such an abandoned write, so calls made after it still
see it, as with SQLite's single worker thread; :meth:`PgPool.close` waits for all of them.

A write whose connection fails while its ``COMMIT`` is under way may have committed or not:
the server can commit and the acknowledgement be lost. Retrying it blindly would make it twice
(a message appended twice, a log row refused as a duplicate key, a turn ended twice). So
:meth:`PgPool.write` learns its transaction's id and its backend in the ``BEGIN`` round trip
and, when the ``COMMIT`` fails that way, asks the server on another connection what became of
that transaction (``pg_xact_status``; the old backend is ended first if it still holds it):
committed, the write returns what it computed — the result of what committed; aborted, it
fails like any write and may be retried. PostgreSQL 14 or later.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar, assert_never, cast
from urllib.parse import unquote

import psycopg
from psycopg import AsyncConnection
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool

from drover.errors import StoreError
from drover.store.migrations.postgres import migrate
from drover.store.postgres.dialect import POSTGRES
from drover.store.sql.plan import Atomic, Exec, Mode, Plan, Query

T = TypeVar("T")
Conn = AsyncConnection[DictRow]
log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 10
_LIBPQ_PREFIX = re.compile(
    r"^(?:connection (?:failed|is bad): )?(?:connection to server (?:at|on) .*? failed: )?"
)
_USERINFO = re.compile(r"^[a-z]+://[^:/@]*:([^@/]*)@", re.IGNORECASE)


def reason(exc: BaseException) -> str:
    """The first line of an error's message, without libpq's connection preamble."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return _LIBPQ_PREFIX.sub("", lines[0]) if lines else type(exc).__name__


def redact(url: str, text: str) -> str:
    """``text`` without the password of ``url`` (as written or percent-decoded)."""
    match = _USERINFO.match(url.strip())
    if match and match.group(1):
        for secret in sorted({match.group(1), unquote(match.group(1))}, key=len, reverse=True):
            text = text.replace(secret, "***")
    return text


def _retrieve(task: asyncio.Future[Any]) -> None:
    """Mark a shielded call's outcome as seen (its caller may have been cancelled)."""
    if not task.cancelled():
        task.exception()


class PgPool:
    """An open pool and the calls running on it."""

    def __init__(self, pool: AsyncConnectionPool[Conn]) -> None:
        self._pool = pool
        self._closed = False
        self._tasks: set[asyncio.Task[Any]] = set()
        self._abandoned: set[asyncio.Task[Any]] = set()

    @classmethod
    async def open(cls, url: str, *, now: float, min_size: int, max_size: int) -> PgPool:
        try:
            params = conninfo_to_dict(url.strip())
        except psycopg.Error as exc:
            raise StoreError(f"invalid PostgreSQL URL: {redact(url, reason(exc))}") from None
        params.setdefault("connect_timeout", CONNECT_TIMEOUT)
        where = f"{params.get('host') or 'localhost'}:{params.get('port') or 5432}"
        conninfo = make_conninfo("", **params)

        def failure(exc: BaseException) -> StoreError:
            return StoreError(
                f"cannot connect to PostgreSQL at {where}: {redact(url, reason(exc))}"
            )

        try:
            conn = await AsyncConnection.connect(conninfo, autocommit=True)
        except psycopg.Error as exc:
            raise failure(exc) from None
        try:
            await migrate(conn, now)
        except psycopg.Error as exc:
            raise StoreError(f"cannot open the journal at {where}: {reason(exc)}") from exc
        except StoreError as exc:  # a newer drover's schema
            raise StoreError(f"cannot open the journal at {where}: {exc}") from None
        finally:
            await conn.close()
        pool = AsyncConnectionPool(
            conninfo,
            # No server-side prepared statements: they break behind PgBouncer's transaction
            # pooling, and a schema migrated by another process invalidates their plans.
            kwargs={"autocommit": True, "row_factory": dict_row, "prepare_threshold": None},
            connection_class=AsyncConnection[DictRow],
            min_size=min_size,
            max_size=max_size,
            open=False,
            timeout=30,
            check=AsyncConnectionPool.check_connection,
            name="drover-journal",
        )
        try:
            await pool.open(wait=True, timeout=2 * CONNECT_TIMEOUT)
        except BaseException as exc:
            await pool.close()
            if isinstance(exc, psycopg.Error):
                raise failure(exc) from None
            raise
        return cls(pool)

    async def close(self) -> None:
        """Let the calls already started finish, then close the connections."""
        self._closed = True
        if self._tasks:
            await asyncio.wait(set(self._tasks))
        await self._pool.close()

    async def call(self, fn: Callable[[Conn], Awaitable[T]]) -> T:
        """Run ``fn`` on a connection of the pool (in autocommit mode); see the module doc."""
        return await self._shielded(lambda: self._run(fn))

    async def write(self, fn: Callable[[Conn], Awaitable[T]]) -> T:
        """Run ``fn`` in one transaction, made once (see the module doc)."""
        return await self._shielded(lambda: self._write(fn))

    async def _shielded(self, work: Callable[[], Coroutine[Any, Any, T]]) -> T:
        if self._abandoned:
            await asyncio.wait(set(self._abandoned))
        if self._closed:
            raise StoreError("the journal is not open")
        task = asyncio.create_task(work())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(_retrieve)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.done():
                self._abandoned.add(task)
                task.add_done_callback(self._abandoned.discard)
            raise

    async def _run(self, fn: Callable[[Conn], Awaitable[T]]) -> T:
        try:
            async with self._pool.connection() as conn:
                return await fn(conn)
        except psycopg.Error as exc:
            raise StoreError(f"journal error: {reason(exc)}") from exc

    async def _write(self, fn: Callable[[Conn], Awaitable[T]]) -> T:
        tx = _Transaction()
        try:
            async with self._pool.connection() as conn:
                return await tx.run(conn, fn)
        except psycopg.OperationalError as exc:
            # (out of the broken connection's block: the pool has dropped it)
            if tx.committing and await self._committed(tx):
                return cast(T, tx.result)
            raise StoreError(f"journal error: {reason(exc)}") from exc
        except psycopg.Error as exc:
            raise StoreError(f"journal error: {reason(exc)}") from exc

    async def _committed(self, tx: _Transaction) -> bool:
        """Whether ``tx``, whose ``COMMIT`` got no answer, committed. Raises when that cannot
        be known (the write must not be made again blindly)."""
        try:
            async with self._pool.connection() as conn:
                status = await _xact_status(conn, tx.xid)
                if status == "in progress":
                    # Its backend has not seen the COMMIT (or the client's end) yet: end it —
                    # its client is gone — and the transaction is over, one way or the other.
                    await conn.execute("SELECT pg_terminate_backend(%s, 5000)", [tx.pid])
                    status = await _xact_status(conn, tx.xid)
        except psycopg.Error as exc:
            raise StoreError(
                f"journal error: a write's COMMIT went unanswered and its outcome cannot be "
                f"read ({reason(exc)})"
            ) from exc
        log.warning("journal: a write's COMMIT went unanswered; it was %s", status)
        if status == "committed":
            return True
        if status == "aborted":
            return False
        raise StoreError(f"journal error: a write's COMMIT went unanswered ({status})")


#: Opens a write transaction and learns, in the same round trip, its id and its backend.
_BEGIN = "BEGIN; SELECT pg_current_xact_id()::text AS xid, pg_backend_pid() AS pid"


class _Transaction:
    """One write transaction: what it needs to learn its fate when its COMMIT goes
    unanswered."""

    __slots__ = ("committing", "pid", "result", "xid")

    def __init__(self) -> None:
        self.xid = ""
        self.pid = 0
        self.result: Any = None
        #: The COMMIT was sent (or is being sent): the transaction may have committed.
        self.committing = False

    async def run(self, conn: Conn, fn: Callable[[Conn], Awaitable[T]]) -> T:
        cur = await conn.execute(_BEGIN)
        cur.nextset()
        row = await cur.fetchone()
        assert row is not None
        self.xid, self.pid = str(row["xid"]), int(row["pid"])
        try:
            result = await fn(conn)
        except BaseException:
            if not conn.closed:
                with contextlib.suppress(psycopg.Error):
                    await conn.execute("ROLLBACK")
            raise
        self.result, self.committing = result, True
        await conn.execute("COMMIT")
        return result


async def _xact_status(conn: Conn, xid: str) -> str | None:
    cur = await conn.execute("SELECT pg_xact_status(%s::xid8) AS status", [xid])
    row = await cur.fetchone()
    return None if row is None or row["status"] is None else str(row["status"])


class PgConnection:
    """The PostgreSQL journal's connections at ``url``: a pool of ``min_size`` to ``max_size``,
    opened (and the schema migrated) by :meth:`open`."""

    def __init__(
        self,
        url: str,
        *,
        clock: Callable[[], float] = time.time,
        min_size: int = 1,
        max_size: int = 4,
    ) -> None:
        self.url = url
        self._clock = clock
        self._min_size = min_size
        self._max_size = max_size
        self._db: PgPool | None = None
        self._opening = asyncio.Lock()

    async def open(self) -> None:
        async with self._opening:
            if self._db is None:
                self._db = await PgPool.open(
                    self.url, now=self._clock(), min_size=self._min_size, max_size=self._max_size
                )

    async def close(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            await asyncio.shield(db.close())

    async def perform(self, plan: Plan[T], mode: Mode) -> T:
        """Run ``plan`` in ``mode``: a write (``bulk`` too) in one transaction made once, a
        snapshot in a read-only repeatable-read transaction."""
        db = self._db
        if db is None:
            raise StoreError("the journal is not open")
        if mode == "write" or mode == "bulk":
            return await db.write(lambda conn: _drive(conn, plan))
        if mode == "read":
            return await db.call(lambda conn: _drive(conn, plan))

        async def snapshot(conn: Conn) -> T:
            async with conn.transaction():
                await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                return await _drive(conn, plan)

        return await db.call(snapshot)


async def _drive(conn: Conn, plan: Plan[T]) -> T:
    """Run ``plan`` to its end on ``conn``."""
    result: Any = None
    try:
        while True:
            op = plan.send(result)
            match op:
                case Query(sql, params):
                    cur = await conn.execute(POSTGRES.sql(sql), params)
                    result = await cur.fetchall()
                case Exec(sql, params):
                    result = (await conn.execute(POSTGRES.sql(sql), params)).rowcount
                case Atomic(sub):
                    async with conn.transaction():
                        result = await _drive(conn, sub)
                case _:
                    assert_never(op)
    except StopIteration as stop:
        value: T = stop.value
        return value
