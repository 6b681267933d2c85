"""The SQL backends of the journal: SQLite (the embedded default) and PostgreSQL.

:func:`open_store` picks a backend from a path or URL and returns a
:class:`~drover.journal.protocol.Store` (the protocol, its records and the journal that writes
through it are the :mod:`drover.journal` package's). Both backends are one SQL store over a
dialect (:mod:`~drover.store.sql.dialect`) and a connection; the schema is
:mod:`~drover.store.migrations.steps` (with :mod:`~drover.store.migrations.postgres` on PostgreSQL),
and rows become records in :mod:`~drover.store.sql.rows`.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from drover.errors import StoreError
from drover.journal.protocol import Store
from drover.store.sqlite.store import SqliteStore

if TYPE_CHECKING:
    from drover.store.postgres.store import PostgresStore

__all__ = ["PostgresStore", "SqliteStore", "default_db_path", "open_store"]


#: Names imported on first use: psycopg takes a quarter of a second to import (only PostgreSQL
#: users pay for it).
_LAZY = {"PostgresStore": "drover.store.postgres.store"}


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
    default SQLite file, whose directory is created; a named file's directory must exist).
    Call ``await store.open()`` (or ``async with``) before use."""
    if url_or_path is None or not url_or_path.strip():
        return SqliteStore(default_db_path(), create_parent=True)
    target = url_or_path.strip()
    scheme = target.split("://", 1)[0].lower() if "://" in target else ""
    if scheme in ("postgresql", "postgres"):
        from drover.store.postgres.store import PostgresStore

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
