"""The durable journal: sessions, turns, messages, tool calls and the event log.

:func:`open_store` picks a backend from a path or URL; :class:`~drover.store.base.Store` is the
protocol every backend implements, made of the narrow ones its users take (``SessionStore``,
``TurnLeases``, ``TurnJournal``, ``EventLog``); :class:`~drover.store.journal.Journal` is the
event sink that records a running turn; :mod:`~drover.store.history` rebuilds the model history
from what was stored; :mod:`~drover.store.redact` keeps secrets out of it.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from drover.errors import StoreError
from drover.store.base import (
    EventLog,
    EventRecord,
    SessionRecord,
    SessionStore,
    Store,
    StoredMessage,
    ToolCallRecord,
    TurnJournal,
    TurnLeases,
    TurnRecord,
    owner_alive,
)
from drover.store.sqlite import SqliteStore

if TYPE_CHECKING:
    from drover.store.history import build_history, repair_history
    from drover.store.journal import Journal
    from drover.store.postgres import PostgresStore
    from drover.store.redact import Redactor

__all__ = [
    "EventLog",
    "EventRecord",
    "Journal",
    "PostgresStore",
    "Redactor",
    "SessionRecord",
    "SessionStore",
    "SqliteStore",
    "Store",
    "StoredMessage",
    "ToolCallRecord",
    "TurnJournal",
    "TurnLeases",
    "TurnRecord",
    "build_history",
    "default_db_path",
    "open_store",
    "owner_alive",
    "repair_history",
]


#: Names imported on first use: psycopg takes a quarter of a second to import (only PostgreSQL
#: users pay for it), and the commands that only read the journal (``drover sessions``,
#: ``drover show``) never load the journal's writer, history repair or redaction.
_LAZY = {
    "PostgresStore": "drover.store.postgres",
    "Journal": "drover.store.journal",
    "build_history": "drover.store.history",
    "repair_history": "drover.store.history",
    "Redactor": "drover.store.redact",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def default_db_path() -> Path:
    """``drover.db`` in the user's data directory (e.g. ``~/.local/share/drover``)."""
    import platformdirs  # only when no journal was named

    return Path(platformdirs.user_data_dir("drover")) / "drover.db"


def open_store(url_or_path: str | None = None) -> Store:
    """The store for a path, a ``sqlite:///path`` URL, or a ``postgresql://`` URL (None: the
    default SQLite file). Call ``await store.open()`` (or ``async with``) before use."""
    if url_or_path is None or not url_or_path.strip():
        return SqliteStore(default_db_path())
    target = url_or_path.strip()
    scheme = target.split("://", 1)[0].lower() if "://" in target else ""
    if scheme in ("postgresql", "postgres"):
        from drover.store.postgres import PostgresStore

        return PostgresStore(target)
    if scheme == "sqlite":
        path = target.split("://", 1)[1]
        # sqlite:///relative/… keeps one slash after the authority; sqlite:////abs/… two.
        path = path[1:] if path.startswith("/") else path
        return SqliteStore(path or ":memory:")
    if scheme:
        raise StoreError(f"unsupported journal URL scheme {scheme!r} (use a path or postgresql://)")
    if target == ":memory:":
        return SqliteStore(target)
    return SqliteStore(Path(target).expanduser())
