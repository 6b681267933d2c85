"""The PostgreSQL journal: a :class:`~drover.journal.protocol.Store` several processes share.

A :class:`~drover.store.sql_store.SqlStore` of the PostgreSQL dialect
(:mod:`drover.store.pg_dialect`: the same records, ordering, recovery and folding rules as
SQLite; the conformance suite runs on both) on the pooled connections of
:mod:`drover.store.pg_conn`, which make a started write finish even when its caller is
cancelled. Every write is one short transaction; the session row lock (``SELECT … FOR UPDATE``)
is what SQLite's file lock is there.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from drover.store.pg_conn import PgConnection, redact
from drover.store.pg_dialect import POSTGRES
from drover.store.sql_store import SqlStore


class PostgresStore(SqlStore):
    """The SQL store on the PostgreSQL database at ``url`` (a pool of ``min_size`` to
    ``max_size`` connections)."""

    def __init__(
        self,
        url: str,
        *,
        clock: Callable[[], float] = time.time,
        min_size: int = 1,
        max_size: int = 4,
    ) -> None:
        connection = PgConnection(url, clock=clock, min_size=min_size, max_size=max_size)
        super().__init__(POSTGRES, connection, clock=clock)
        self.url = url

    def __repr__(self) -> str:
        return f"PostgresStore({redact(self.url, self.url)!r})"
