"""The SQLite journal: the embedded default :class:`~drover.journal.protocol.Store`.

A :class:`~drover.store.sql.store.SqlStore` of the SQLite dialect on the connections of
:mod:`drover.store.sqlite.connection`: reads on its worker thread (serialised and shielded), writes
on the calling thread when nothing makes them wait and on the worker otherwise. Every write is
one short ``BEGIN IMMEDIATE`` transaction, which takes the write lock up front: several
processes (or several stores in one process) can share a file without "database is locked",
and what a write reads to decide (the next sequence number, a running turn of the session, the
turn's owner) holds until it commits.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from drover.store.sql.dialect import SQLITE
from drover.store.sql.store import SqlStore
from drover.store.sqlite.connection import SqliteConnection


class SqliteStore(SqlStore):
    """The SQL store on a SQLite file at ``path`` (or ``":memory:"``). The file's directory must
    exist unless ``create_parent`` (drover's own default data directory is made on first use)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        clock: Callable[[], float] = time.time,
        busy_timeout_ms: int = 5000,
        create_parent: bool = False,
    ) -> None:
        connection = SqliteConnection(
            path, clock=clock, busy_timeout_ms=busy_timeout_ms, create_parent=create_parent
        )
        super().__init__(SQLITE, connection, clock=clock)
        self.path = connection.path
        self.create_parent = create_parent
