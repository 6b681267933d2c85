"""The log's frequent payloads, stored as the list of their values (SQLite's text).

Most log rows are a handful of event forms whose keys never change: a tool call's states, its
start and end, the usage reports, the references to a step's text and messages. Their key names
were most of each row's bytes (a ``usage`` row: ~150 bytes, ~25 of them values). A payload whose
keys are, in order, those of a known *shape* is stored as ``[shape, value, value…]`` (a nested
object of a known shape, like ``usage``, gives its values in place); any other payload is stored
as its object, without its ``type`` (the row's ``type`` column holds it). A read builds the same
object again, keys in the same order, ``type`` first: what a replay sends is what went out live.

:data:`SHAPES` is append-only, like the migrations: a stored row names its shape by its place in
the tuple. A shape added later needs a migration of its own (even one with no statement), so
that a drover that does not know it refuses the journal instead of misreading its rows. Both
backends store the log's payloads as text and pack alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from drover.errors import StoreError

_USAGE = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "partial")
_CALL = ("call_id", "call_index", "name", "state")

#: ``(type, keys)``: the keys of a payload after its ``type``; a ``(key, keys)`` pair is a
#: nested object of those keys. Append only: a row names its shape by its index here.
SHAPES: tuple[tuple[str, tuple[str | tuple[str, tuple[str, ...]], ...]], ...] = (
    ("tool_state", _CALL),
    ("tool_state", (*_CALL, "input")),
    ("tool_state", (*_CALL, "output_of")),
    ("tool_state", (*_CALL, "output_of", "is_error")),
    ("tool_state", (*_CALL, "output")),
    ("tool_state", (*_CALL, "output", "is_error")),
    ("tool_state", (*_CALL, "input", "output_of")),
    ("tool_state", (*_CALL, "input", "output")),
    ("tool_start", ("call_index", "id", "name", "input_summary")),
    ("tool_start", ("call_index", "id", "name", "input_summary", "sandbox")),
    ("tool_done", ("call_index", "id", "name", "is_error", "output_summary")),
    ("usage", (("usage", _USAGE), "total_input", "total_output")),
    ("step_started", ("step",)),
    ("text_delta", ("text_at", "index", "step")),
    ("text_delta", ("text", "index", "step")),
    ("thinking_delta", ("text_at", "index", "step")),
    ("assistant_message", ("message_of", "partial")),
    ("tool_results", ("message_of",)),
)


@dataclass(frozen=True, slots=True)
class _Shape:
    index: int
    kind: str
    #: The payload's own keys, ``type`` first.
    keys: tuple[str, ...]
    #: The positions in ``keys`` (``type`` is 0) of nested objects, with their keys.
    nested: tuple[tuple[int, tuple[str, ...]], ...]


def _shapes() -> tuple[_Shape, ...]:
    made = []
    for index, (kind, entries) in enumerate(SHAPES):
        keys = ["type"]
        nested = []
        for entry in entries:
            if isinstance(entry, tuple):
                nested.append((len(keys), entry[1]))
                keys.append(entry[0])
            else:
                keys.append(entry)
        made.append(_Shape(index, kind, tuple(keys), tuple(nested)))
    return tuple(made)


_BY_INDEX = _shapes()
_BY_KEYS = {(s.kind, s.keys): s for s in _BY_INDEX}


def pack(kind: str, body: Mapping[str, Any]) -> list[Any] | None:
    """``body`` (an event's JSON form, ``type`` first) as ``[shape, values…]``, or None when its
    keys are not, in order, those of a shape of ``kind``."""
    shape = _BY_KEYS.get((kind, tuple(body)))
    if shape is None:
        return None
    values = list(body.values())
    if not shape.nested:
        values[0] = shape.index
        return values
    out: list[Any] = [shape.index]
    start = 1
    for at, keys in shape.nested:
        inner = values[at]
        if type(inner) is not dict or tuple(inner) != keys:
            return None
        out += values[start:at]
        out += inner.values()
        start = at + 1
    out += values[start:]
    return out


def unpack(kind: str, stored: Any) -> dict[str, Any]:
    """A stored payload of type ``kind`` as its event's JSON form, ``type`` first: a packed
    list, an object stored without its ``type``, or a whole one (rows of older versions)."""
    if type(stored) is dict:
        return stored if "type" in stored else {"type": kind, **stored}
    if type(stored) is not list or not stored or type(stored[0]) is not int:
        raise StoreError(f"a log row of type {kind!r} holds a payload that is not an event")
    index = stored[0]
    if not 0 <= index < len(_BY_INDEX) or _BY_INDEX[index].kind != kind:
        raise StoreError(
            f"a log row of type {kind!r} names payload shape {index}, which this version of "
            "drover does not have for that type"
        )
    shape = _BY_INDEX[index]
    width = len(shape.keys) + sum(len(keys) - 1 for _, keys in shape.nested)
    if len(stored) != width:
        raise StoreError(
            f"a log row of type {kind!r} holds {len(stored) - 1} values for a shape of {width - 1}"
        )
    if not shape.nested:
        payload = dict(zip(shape.keys, stored, strict=True))
        payload["type"] = kind
        return payload
    payload = {"type": kind}
    at = 1
    nested = dict(shape.nested)
    for position, key in enumerate(shape.keys[1:], start=1):
        keys = nested.get(position)
        if keys is None:
            payload[key] = stored[at]
            at += 1
        else:
            payload[key] = dict(zip(keys, stored[at : at + len(keys)], strict=True))
            at += len(keys)
    return payload
