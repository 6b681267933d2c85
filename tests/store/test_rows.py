"""A JSON column decodes as ``json.loads`` decodes it: same value, or the same error."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drover.store.sql.rows import decode_marks, encode_marks, json_value


@pytest.mark.parametrize(
    "text",
    ['{"a":[1,2.5,null]}', ' {"a":1}', '{"a":1} ', "[1,2]x", "\ufeff{}", "", "nul", '"\\ud800"'],
)
def test_json_column_decodes_as_json_loads(text: str) -> None:
    def outcome(decode: Any) -> tuple[str, Any]:
        try:
            return "value", decode(text)
        except json.JSONDecodeError as exc:
            return "error", str(exc)

    assert outcome(json_value) == outcome(json.loads)


def test_decoded_values_are_passed_through() -> None:
    assert json_value({"a": 1}) == {"a": 1}  # PostgreSQL's jsonb, decoded by the driver
    assert json_value(b'{"b":2}') == {"b": 2}


# -- marks -------------------------------------------------------------------------------------


def _reference_encode(seq: int, marks: list[tuple[int, int]] | None) -> str | None:
    """The marks' encoding as it was first written: a Python step per mark."""
    if marks is None:
        return None
    pairs: list[str] = []
    prev_seq, prev_end = seq, 0
    for mark_seq, end in marks:
        pairs.append(f"{mark_seq - prev_seq},{end - prev_end}")
        prev_seq, prev_end = mark_seq, end
    return f"[{','.join(pairs)}]"


def _reference_decode(seq: int, raw: str | None) -> tuple[tuple[int, int], ...] | None:
    if raw is None:
        return None
    flat = json.loads(raw)
    out: list[tuple[int, int]] = []
    prev_seq, prev_end = seq, 0
    for i in range(0, len(flat) - 1, 2):
        prev_seq, prev_end = prev_seq + int(flat[i]), prev_end + int(flat[i + 1])
        out.append((prev_seq, prev_end))
    return tuple(out)


_ints = st.integers(-(10**12), 10**12)


@settings(max_examples=300, deadline=None)
@given(_ints, st.one_of(st.none(), st.lists(st.tuples(_ints, _ints), max_size=40)))
def test_marks_encode_and_decode_as_they_always_did(
    seq: int, marks: list[tuple[int, int]] | None
) -> None:
    encoded = encode_marks(seq, marks)
    assert encoded == _reference_encode(seq, marks)  # the stored bytes
    assert decode_marks(seq, encoded) == _reference_decode(seq, encoded)
    assert decode_marks(seq, encoded) == (None if marks is None else tuple(marks))


@pytest.mark.parametrize("raw", ["[]", "[1]", "[1, 2, 3]", "[3,4,1,-2,5]", "[1.0,2]"])
def test_marks_not_written_here_decode_as_they_always_did(raw: str) -> None:
    assert decode_marks(7, raw) == _reference_decode(7, raw)
