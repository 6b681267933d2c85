"""The store's SQL as plans, and the connection a plan runs on.

The store's logic (the ``sql_*`` modules) is written once as *plans*: generators that yield
the statements they need (:class:`Query` for rows, :class:`Exec` for a row count,
:class:`Atomic` for a sub-plan in a write transaction of its own) and receive each result
back. A :class:`Connection` drives a plan to its end — SQLite synchronously (on its worker
thread, or a write on the caller's), PostgreSQL with ``await`` — so neither the sync/async split
nor the driver leaks into the logic. Statements are written in the neutral form of
:mod:`drover.store.sql.dialect`, which the connection spells for its backend.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, Literal, NamedTuple, Protocol, TypeAlias, TypeVar

T = TypeVar("T")

#: How a connection runs a plan: ``read``, no transaction; ``write``, one short write
#: transaction; ``bulk``, a write transaction of many bytes, which a connection keeps off its
#: caller's thread; ``snapshot``, one consistent read.
Mode: TypeAlias = Literal["read", "write", "bulk", "snapshot"]


class Row(Protocol):
    """A result row: anything indexable by column name (``sqlite3.Row``, psycopg's dict row)."""

    def __getitem__(self, key: str, /) -> Any: ...


# Plain tuples (``NamedTuple``): a store makes one of these a statement, and building a frozen
# dataclass costs several times as much.
class Query(NamedTuple):
    """A statement whose rows the plan receives (a list of :class:`Row`)."""

    sql: str
    params: tuple[Any, ...] = ()


class Exec(NamedTuple):
    """A statement whose row count the plan receives."""

    sql: str
    params: tuple[Any, ...] = ()


class Atomic(NamedTuple):
    """A sub-plan run in a write transaction of its own; the plan receives its result."""

    plan: Plan[Any]


Op: TypeAlias = "Query | Exec | Atomic"
Plan: TypeAlias = Generator[Op, Any, T]


def rows(sql: str, *params: Any) -> Plan[list[Row]]:
    result: list[Row] = yield Query(sql, params)
    return result


def execute(sql: str, *params: Any) -> Plan[int]:
    count: int = yield Exec(sql, params)
    return count


def atomic(plan: Plan[T]) -> Plan[T]:
    result: T = yield Atomic(plan)
    return result


class Connection(Protocol):
    """Where a SQL store's plans run: its backend's connections, opened and closed with the
    store. A call that has started completes even if the awaiting task is cancelled; errors are
    :class:`~drover.errors.StoreError` with a one-line message."""

    async def open(self) -> None:
        """Connect and bring the schema up to date (idempotent)."""

    async def close(self) -> None: ...

    async def perform(self, plan: Plan[T], mode: Mode) -> T:
        """Run ``plan`` to its end in ``mode``; its result."""
        ...
