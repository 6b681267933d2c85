"""The PostgreSQL journal: a :class:`~drover.journal.protocol.Store` several processes share.

The logic is :class:`~drover.store.sql_store.SqlStore`'s (the same records, ordering, recovery
and folding rules as SQLite; the conformance suite runs on both); this module drives its plans
with psycopg 3's async API. :mod:`~drover.store.pg_conn` owns the connections and makes a
started write finish even when its caller is cancelled. Every write is one short transaction;
the session row lock (``SELECT … FOR UPDATE``) is what SQLite's file lock is there.

PostgreSQL ``text`` and ``jsonb`` cannot hold U+0000, which SQLite stores: in free text (text
deltas, tool output, errors, JSON strings) it is written as U+FFFD instead of failing the write.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from typing import Any, TypeVar, assert_never

from psycopg.types.json import Jsonb

from drover.errors import StoreError
from drover.store.dialect import Atomic, Dialect, Exec, Plan, Query, dumps
from drover.store.pg_conn import Conn, PgPool, redact
from drover.store.sql_log import Mode
from drover.store.sql_store import SqlStore

T = TypeVar("T")

# An escaped NUL in JSON text, not preceded by an escaped backslash.
_JSON_NUL = re.compile(r"(?<!\\)((?:\\\\)*)\\u0000")


def _dumps(value: Any) -> str:
    """JSON for a ``jsonb`` column, which cannot hold NUL (it becomes U+FFFD)."""
    text = dumps(value)
    return _JSON_NUL.sub(r"\1\\ufffd", text) if "\\u0000" in text else text


def _jsonb(value: Any) -> Jsonb | None:
    return None if value is None else Jsonb(value, dumps=_dumps)


def _text(value: str) -> str:
    return value.replace("\x00", "\ufffd")


POSTGRES = Dialect(
    name="postgres",
    casts=True,
    json=_jsonb,
    text=_text,
    creation_order="n",
    greatest="GREATEST",
    same="IS NOT DISTINCT FROM",
    lock=" FOR UPDATE OF s",
    lock_skip=" FOR NO KEY UPDATE SKIP LOCKED",
    returning=True,
    no_limit=None,
)


class PostgresStore(SqlStore):
    dialect = POSTGRES

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

    def __repr__(self) -> str:
        return f"PostgresStore({redact(self.url, self.url)!r})"

    # -- lifecycle -----------------------------------------------------------------------------

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

    # -- plumbing ------------------------------------------------------------------------------

    def _open_db(self) -> PgPool:
        if self._db is None:
            raise StoreError("the journal is not open")
        return self._db

    async def _perform(self, plan: Plan[T], mode: Mode) -> T:
        db = self._open_db()
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
