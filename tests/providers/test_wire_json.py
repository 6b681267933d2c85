"""``encode_body`` writes what the SDKs' ``json`` encoding writes, or the same JSON where only a
float's spelling differs, and leaves to ``json`` (or refuses, as ``json`` does) what orjson
would write differently: NaN, the infinities, big integers, keys that are not strings."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drover.providers.wire_json import SDK_JSON, encode_body


def nested(scalars: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
        max_leaves=20,
    )


no_floats = st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text()
values = nested(no_floats | st.floats(allow_nan=False, allow_infinity=False) | st.integers())


def sdk_bytes(value: Any) -> bytes:
    return SDK_JSON.encode(value).encode()


@given(values)
def test_the_same_json_as_the_sdks_encoding(value: Any) -> None:
    encoded = encode_body(value)
    assert encoded is not None
    assert json.loads(encoded) == json.loads(sdk_bytes(value))


@given(nested(no_floats))
def test_the_same_bytes_without_floats(value: Any) -> None:
    assert encode_body(value) == sdk_bytes(value)


def test_every_code_point_is_written_as_json_writes_it() -> None:
    text = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000)
    assert encode_body({"t": text}) == sdk_bytes({"t": text})


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("where", ["top", "list", "dict"])
def test_a_non_finite_float_is_refused_as_json_refuses_it(bad: float, where: str) -> None:
    body: Any = {"a": None, "x": bad}
    if where == "list":
        body = {"a": [None, [1.5, bad]]}
    elif where == "dict":
        body = [{"a": None}, {"b": {"c": bad}}]
    assert encode_body(body) is None
    with pytest.raises(ValueError, match="not JSON compliant"):
        sdk_bytes(body)


@pytest.mark.parametrize(
    "body",
    [
        {"n": 2**64},  # beyond orjson's 64 bits
        {"n": -(2**63) - 1},
        {"1": {2: "x"}},  # a key json makes a string of
        {"t": type("S", (str,), {})("sub")},  # subclasses: orjson might write them otherwise
        {"null": None, "f": 1e-05},  # null present, every float finite: orjson's bytes
    ],
)
def test_what_orjson_refuses_json_encodes(body: Any) -> None:
    assert json.loads(encode_body(body) or b"") == json.loads(sdk_bytes(body))
    if "f" not in body:
        assert encode_body(body) == sdk_bytes(body)


def test_what_json_refuses_too_is_left_to_the_sdk() -> None:
    assert encode_body({"t": "\ud800"}) is None  # a lone surrogate: not UTF-8
    assert encode_body({"s": {1, 2}}) is None
