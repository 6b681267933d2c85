"""A JSON column decodes as ``json.loads`` decodes it: same value, or the same error."""

from __future__ import annotations

import json
from typing import Any

import pytest

from drover.store.rows import json_value


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
