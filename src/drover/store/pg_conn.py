"""Connections of the PostgreSQL journal: opening, one-line errors, calls that finish.

:meth:`PgPool.open` parses the URL, connects once (so an unreachable server gives a clear error
and the schema is migrated before anything else runs), then opens a
:class:`psycopg_pool.AsyncConnectionPool` whose connections are checked before each use (a
server restart costs a reconnect, not a failed write). Every error becomes a one-line
:class:`~drover.errors.StoreError` that never shows the URL's password.

:meth:`PgPool.call` runs each call in a task of its own awaited through :func:`asyncio.shield`:
a write that has started completes, and commits, even if its caller is cancelled (the user
pressed Esc). The next call waits for such an abandoned write, so calls made after it still
see it, as with SQLite's single worker thread; :meth:`PgPool.close` waits for all of them.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import unquote

import psycopg
from psycopg import AsyncConnection
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool

from drover.errors import StoreError
from drover.store.pg_migrations import migrate

T = TypeVar("T")
Conn = AsyncConnection[DictRow]

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
        if self._abandoned:
            await asyncio.wait(set(self._abandoned))
        if self._closed:
            raise StoreError("the journal is not open")
        task = asyncio.create_task(self._run(fn))
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

    async def write(self, fn: Callable[[Conn], Awaitable[T]]) -> T:
        """Run ``fn`` in one transaction."""

        async def tx(conn: Conn) -> T:
            async with conn.transaction():
                return await fn(conn)

        return await self.call(tx)

    async def _run(self, fn: Callable[[Conn], Awaitable[T]]) -> T:
        try:
            async with self._pool.connection() as conn:
                return await fn(conn)
        except psycopg.Error as exc:
            raise StoreError(f"journal error: {reason(exc)}") from exc
