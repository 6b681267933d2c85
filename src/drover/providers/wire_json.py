"""The official SDKs' JSON, in a fraction of the time: a request body encoded as they encode
it, and a streamed event's data decoded as they decode it.

Both SDKs encode a request with ``json.dumps(body, ensure_ascii=False, separators=(",", ":"),
allow_nan=False)`` (``openai._utils._json.openapi_dumps``, ``anthropic._utils._json``). For the
2.5 MB body of a long session that is 10–15 ms a request: CPython's encoder takes its slow path
for ``ensure_ascii=False``. ``orjson`` writes the same bytes for every string, integer, boolean,
null, list and dict with string keys (every code point checked in ``tests/providers``); a float
may be spelled another way (``0.00001`` for ``1e-05``), the same number. What it does otherwise,
the body falls back to ``json`` for:

* it refuses what ``json`` may take (keys that are not strings, integers beyond 64 bits, a
  lone surrogate, a subclass of ``str``/``int``/``dict``/``list``, a dataclass, a datetime):
  ``json`` encodes it, or refuses it too;
* it writes ``NaN`` and the infinities as ``null`` where ``json`` (``allow_nan=False``) refuses
  them: a body whose encoding holds ``null`` is searched for such a float first.

:func:`encode_body` answers ``None`` for a body ``json`` refuses as well: the caller then goes
through the SDK's own ``create``, which handles it (or fails) its own way.

The SDKs decode each event of a stream with ``json.loads``; :func:`decode_event` decodes it with
``orjson`` and hands what ``orjson`` refuses to ``json``. ``orjson`` refuses some text ``json``
reads (``NaN``, ``Infinity``, numbers beyond a double, a lone surrogate escape): ``json`` then
reads it as the SDK did; text both refuse raises ``json``'s own error, with the SDK's message.
``orjson`` reads an integer beyond 64 bits as a float (``json``: an int), which no count reaches.
"""

from __future__ import annotations

import json
import math
from typing import Any

import orjson

#: The SDKs' request encoding, for a body of plain JSON values.
SDK_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)

#: What ``json`` would encode differently or refuse goes to ``json`` (orjson raises for it).
_PLAIN_ONLY = (
    orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_SUBCLASS
)


def encode_body(body: Any) -> bytes | None:
    """``body`` as the SDKs' JSON encoding of it; ``None`` when that encoding refuses it."""
    try:
        encoded = orjson.dumps(body, option=_PLAIN_ONLY)
    except TypeError:  # orjson.JSONEncodeError: see the module docstring
        pass
    else:
        if b"null" not in encoded or _finite(body):
            return encoded
    try:
        return SDK_JSON.encode(body).encode()
    except (TypeError, ValueError):  # ValueError: NaN, a cycle, a lone surrogate (UTF-8)
        return None


def decode_event(data: str) -> Any:
    """A streamed event's data as the SDKs' ``json.loads`` reads it (see the module docstring);
    raises :class:`json.JSONDecodeError` as it does."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


def _finite(value: Any) -> bool:
    """Whether no float in ``value`` is NaN or infinite (which orjson writes as ``null``)."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(map(_finite, value.values()))
    if isinstance(value, list | tuple):
        return all(map(_finite, value))
    return True
