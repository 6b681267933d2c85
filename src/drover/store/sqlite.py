"""The SQLite journal: the embedded default :class:`~drover.journal.protocol.Store`.

The logic is :class:`~drover.store.sql_store.SqlStore`'s; this module drives its plans on the
connections of :mod:`drover.store.sqlite_conn`: reads on its worker thread (serialised and
shielded), writes on the calling thread when nothing makes them wait and on the worker
otherwise; a write of many bytes (``bulk``: a long answer's message) always on the worker.
Every write is one short ``BEGIN IMMEDIATE`` transaction, which takes the write lock up front:
several processes (or several stores in one process) can share a file without "database is
locked", and what a write reads to decide (the next sequence number, a running turn of the
session, the turn's owner) holds until it commits.
"""

from __future__ import annotations

import functools
from typing import Any, TypeVar

from drover.store.dialect import SQLITE, Atomic, Exec, Plan, Query
from drover.store.sql_log import Mode
from drover.store.sql_store import SqlStore
from drover.store.sqlite_conn import WRITE, Conn, SqliteConnection

T = TypeVar("T")
#: A snapshot: one read transaction (deferred: it takes no write lock).
READ = "BEGIN"


class SqliteStore(SqliteConnection, SqlStore):
    dialect = SQLITE

    async def _perform(self, plan: Plan[T], mode: Mode) -> T:
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
