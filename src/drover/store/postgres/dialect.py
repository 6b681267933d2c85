"""How PostgreSQL spells what SQLite says otherwise: the :class:`~drover.store.sql.dialect.Dialect`
of the PostgreSQL journal.

PostgreSQL ``text`` and ``jsonb`` cannot hold U+0000, which SQLite stores: in free text (text
deltas, tool output, errors, JSON strings) it is written as U+FFFD instead of failing the write.
"""

from __future__ import annotations

import re
from typing import Any

from psycopg.types.json import Jsonb

from drover.store.sql.dialect import Dialect, dumps

# An escaped NUL in JSON text, not preceded by an escaped backslash.
_JSON_NUL = re.compile(r"(?<!\\)((?:\\\\)*)\\u0000")


def _dumps(value: Any) -> str:
    """JSON text without NUL (it becomes U+FFFD), as a ``jsonb`` column needs it, and as the
    log's ``text`` payloads keep it too (like every other text column)."""
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
    json_text=_dumps,
    text=_text,
    creation_order="n",
    greatest="GREATEST",
    same="IS NOT DISTINCT FROM",
    lock=" FOR UPDATE OF s",
    lock_skip=" FOR NO KEY UPDATE SKIP LOCKED",
    key_share=" FOR KEY SHARE",
    delete_skip=" FOR UPDATE SKIP LOCKED",
    returning=True,
    no_limit=None,
    byte_order=' COLLATE "C"',
)
