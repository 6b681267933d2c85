"""The PostgreSQL journal: a :class:`~drover.journal.protocol.Store` several processes share.

A :class:`~drover.store.sql.store.SqlStore` of the PostgreSQL dialect
(:mod:`drover.store.postgres.dialect`: the same records, ordering, recovery and folding rules as
SQLite; the conformance suite runs on both) on the pooled connections of
:mod:`drover.store.postgres.connection`, which make a started write finish even when its caller is
cancelled. Every write is one short transaction; the session row lock (``SELECT … FOR UPDATE``)
is what SQLite's file lock is there.

It is also what processes sharing it ask of it beyond the store protocol (a
:class:`~drover.cluster.claims.ClusterJournal`): who runs a session's turn, and control
messages between them over ``NOTIFY`` (:mod:`drover.store.postgres.cluster`).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from drover.store.postgres import cluster
from drover.store.postgres.connection import PgConnection, redact
from drover.store.postgres.dialect import POSTGRES
from drover.store.sql.store import SqlStore


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

    # -- what the processes of a cluster share -------------------------------------------------

    async def running_turn(self, session_id: str) -> tuple[str, str | None] | None:
        return await self.connection.perform(cluster.running_turn(session_id), "read")

    async def running_turns(self, session_ids: list[str]) -> dict[str, str]:
        if not session_ids:
            return {}
        return await self.connection.perform(cluster.running_turns(session_ids), "read")

    async def notify(self, message: dict[str, Any]) -> None:
        payload = cluster.notify_payload(message)
        await self.connection.perform(cluster.notify(payload), "write")

    async def listen(
        self, handler: Callable[[dict[str, Any]], Awaitable[None]], *, retry: float = 1.0
    ) -> None:
        await cluster.listen(self.url, handler, retry=retry)
