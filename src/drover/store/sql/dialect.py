"""What the SQL backends do not share: placeholders, JSON and text columns, locks, a few words.

The store's plans (:mod:`drover.store.sql.plan`) are written once for every backend, their
statements in one neutral form: ``?`` placeholders, and PostgreSQL's casts on the parameters
that need them (``?::jsonb``, ``?::text``, ``?::double precision``), which :meth:`Dialect.sql`
keeps for PostgreSQL and drops for SQLite. What cannot be said in one form is a field of
:class:`Dialect`. This module holds SQLite's (:data:`SQLITE`); PostgreSQL's is
:mod:`drover.store.postgres.dialect`'s.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: ``json.dumps`` with these options builds an encoder on every call; one serves them all.
_encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
_encode = _encoder.encode
#: What that encoder's ``encode`` runs for a container, less its Python layers (``encode``,
#: ``iterencode``, the choice of function); a fresh ``{}`` for its circular-reference check
#: each call, as ``encode`` makes. None when the C accelerator is missing, or does not make
#: the same text (checked once, below).
_c_make_encoder: Callable[..., Any] | None = getattr(json.encoder, "c_make_encoder", None)
_c_basestring = json.encoder.encode_basestring
_default = _encoder.default


def dumps(value: Any) -> str:
    """Compact JSON text, non-ASCII kept as is."""
    if _c_make_encoder is None or type(value) is not dict:
        return _encode(value)
    scan = _c_make_encoder({}, _default, _c_basestring, None, ":", ",", False, False, True)
    return "".join(scan(value, 0))


def _c_dumps_agrees() -> bool:
    sample = {"a": [1, 2.5, None, True, float("inf")], "é": {"k": 'x\u2028"\\'}, "": {}}
    try:
        return dumps(sample) == _encode(sample)
    except Exception:
        return False


if _c_make_encoder is not None and not _c_dumps_agrees():  # another Python's accelerator
    _c_make_encoder = None


_CAST = re.compile(r"::(?:jsonb|text|double precision)\b")


@dataclass(frozen=True, slots=True, kw_only=True)
class Dialect:
    name: str
    #: Whether ``?`` becomes ``%s`` (psycopg) and the parameter casts stay.
    casts: bool
    #: A JSON value as the driver takes it for a JSON column.
    json: Callable[[Any], Any]
    #: A JSON value as text, for a text column that holds JSON (the log's payloads).
    json_text: Callable[[Any], str]
    #: Free text as the column can hold it (PostgreSQL cannot hold U+0000).
    text: Callable[[str], str]
    #: The column that orders rows of ``sessions`` and ``turns`` by creation.
    creation_order: str
    #: The scalar function of the largest of its arguments.
    greatest: str
    #: ``a <same> b`` holds when both are equal or both NULL.
    same: str
    #: Appended to a read that locks the rows it reads until the transaction ends (SQLite
    #: needs none: a write transaction holds the whole file).
    lock: str
    #: Appended to the re-check of a turn to recover: locks it, skipping one being renewed.
    lock_skip: str
    #: Appended to a read that keeps the rows it reads from being deleted until the
    #: transaction ends, as a foreign key's check does, without stopping other readers or
    #: writers of them (SQLite needs none: a write transaction holds the whole file).
    key_share: str
    #: Appended to a read that locks the rows it reads to delete them, skipping any another
    #: transaction holds ("": a backend whose write transaction holds the whole file).
    delete_skip: str
    #: ``INSERT``/``DELETE … RETURNING`` is available (SQLite has it only from 3.35).
    returning: bool
    #: The ``LIMIT`` value that means no limit.
    no_limit: int | None
    #: Appended to a text column to compare it in byte order (UTF-8 bytes sort as code points).
    byte_order: str = ""
    #: A statement that gives the pages a large delete freed back to the file system, in the
    #: deleting transaction ("" when the backend reclaims space on its own).
    reclaim: str = ""
    #: Statements already translated (a store runs the same few hundred over and over).
    _spelled: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    def sql(self, neutral: str) -> str:
        """``neutral`` as this backend spells it."""
        spelled = self._spelled.get(neutral)
        if spelled is None:
            spelled = neutral.replace("?", "%s") if self.casts else _CAST.sub("", neutral)
            self._spelled[neutral] = spelled
        return spelled

    def clean(self, value: str | None) -> str | None:
        return None if value is None else self.text(value)


SQLITE = Dialect(
    name="sqlite",
    casts=False,
    json=dumps,
    json_text=dumps,
    text=str,
    creation_order="rowid",
    greatest="MAX",
    same="IS",
    lock="",
    lock_skip="",
    key_share="",
    delete_skip="",
    returning=sqlite3.sqlite_version_info >= (3, 35, 0),
    no_limit=-1,
    # Files made by this version use auto_vacuum=INCREMENTAL (see sqlite_conn); in older ones
    # it frees nothing and the free pages are reused by later writes.
    reclaim="PRAGMA incremental_vacuum",
)
