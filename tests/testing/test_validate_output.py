"""The structured-output request fields: what the SDKs themselves send is accepted, each rule
the APIs enforce is refused with their kind of message, and through the server a refused
format is the API's 400 sent to the real SDK."""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest
from anthropic.lib._parse._transform import to_json_output_format
from openai.lib._parsing._completions import type_to_response_format_param
from openai.lib._parsing._responses import type_to_text_format_param
from pydantic import BaseModel, Field

from drover.testing import FakeLLMServer
from drover.testing.validate_output import (
    output_config_problems,
    response_format_problems,
    text_format_problems,
)

from .conftest import Collect


class Item(BaseModel):
    title: str
    qty: int = 1


class Order(BaseModel):
    """An order."""

    items: list[Item] = Field(min_length=1)
    note: str | None = None
    main: Item = Field(description="the main item")


def chat(fmt: object) -> list[str]:
    return response_format_problems({"model": "m", "response_format": fmt})


def responses(fmt: object) -> list[str]:
    return text_format_problems({"model": "m", "text": {"format": fmt}})


def claude(fmt: object) -> list[str]:
    return output_config_problems({"model": "m", "output_config": {"format": fmt}})


def strict_chat(schema: dict[str, Any]) -> list[str]:
    return chat(
        {"type": "json_schema", "json_schema": {"name": "X", "schema": schema, "strict": True}}
    )


OBJECT = {"type": "object", "properties": {"a": {"type": "string"}}}


@pytest.mark.parametrize("model", [Item, Order])
def test_what_the_sdks_send_is_accepted(model: type[BaseModel]) -> None:
    assert chat(type_to_response_format_param(model)) == []
    assert responses(type_to_text_format_param(model)) == []
    assert claude(to_json_output_format(model)) == []


def test_no_field_no_problem() -> None:
    assert response_format_problems({"model": "m"}) == []
    assert text_format_problems({"model": "m", "text": {"verbosity": "low"}}) == []
    assert output_config_problems({"model": "m", "output_config": {"effort": "low"}}) == []


def test_openai_format_types() -> None:
    assert chat({"type": "text"}) == responses({"type": "json_object"}) == []
    assert chat({"type": "xml"}) == [
        "Invalid value: 'xml'. Supported values are: 'text', 'json_object', and 'json_schema'."
    ]
    assert chat({"type": "json_schema"}) == [
        "Missing required parameter: 'response_format.json_schema'."
    ]
    assert chat({"type": "text", "json_schema": {}}) == [
        "Unknown parameter: 'response_format.json_schema'."
    ]


def test_openai_format_names() -> None:
    assert chat({"type": "json_schema", "json_schema": {"schema": OBJECT}}) == [
        "Missing required parameter: 'response_format.json_schema.name'."
    ]
    assert (
        "does not match pattern"
        in responses({"type": "json_schema", "name": "a b", "schema": OBJECT})[0]
    )
    assert (
        "string too long" in responses({"type": "json_schema", "name": "n" * 65, "schema": {}})[0]
    )


def test_responses_flattens_the_format_and_needs_a_schema() -> None:
    assert responses({"type": "json_schema", "name": "X"}) == [
        "Missing required parameter: 'text.format.schema'."
    ]
    assert responses({"type": "json_schema", "name": "X", "schema": {}, "json_schema": {}}) == [
        "Unknown parameter: 'text.format.json_schema'."
    ]
    # Chat keeps the schema optional (non-strict).
    assert chat({"type": "json_schema", "json_schema": {"name": "X"}}) == []


def test_openai_strict_schemas_close_every_object() -> None:
    assert strict_chat({**OBJECT, "additionalProperties": False, "required": ["a"]}) == []
    assert strict_chat({**OBJECT, "required": ["a"]}) == [
        "Invalid schema for response_format 'X': In context=(), 'additionalProperties' is "
        "required to be supplied and to be false."
    ]
    nested = {
        "type": "object",
        "properties": {"o": {**OBJECT, "additionalProperties": False}},
        "required": ["o"],
        "additionalProperties": False,
    }
    assert strict_chat(nested) == [
        "Invalid schema for response_format 'X': In context=('properties', 'o'), 'required' is "
        "required to be supplied and to be an array including every key in properties. "
        "Missing 'a'."
    ]
    assert strict_chat({"type": "array", "items": OBJECT})[0].endswith(
        "schema must be a JSON Schema of 'type: \"object\"', got 'type: \"array\"'."
    )
    ref = {
        "type": "object",
        "properties": {"a": {"$ref": "#/$defs/A", "description": "x"}},
        "required": ["a"],
        "additionalProperties": False,
        "$defs": {"A": {"type": "string"}},
    }
    assert strict_chat(ref) == [
        "Invalid schema for response_format 'X': In context=('properties', 'a'), $ref cannot "
        "have keywords {'description'}."
    ]
    # Without strict, any schema.
    assert chat({"type": "json_schema", "json_schema": {"name": "X", "schema": OBJECT}}) == []


def test_anthropic_output_formats() -> None:
    closed = {**OBJECT, "additionalProperties": False}
    assert claude({"type": "json_schema", "schema": closed}) == []
    assert claude({"type": "json_schema", "schema": closed, "name": "X"}) == [
        "output_config.format.name: Extra inputs are not permitted"
    ]
    assert claude({"type": "json", "schema": closed}) == [
        "output_config.format.type: Input should be 'json_schema'"
    ]
    assert claude({"type": "json_schema"}) == ["output_config.format.schema: Field required"]
    assert claude({"type": "json_schema", "schema": OBJECT}) == [
        "output_config.format.schema: For 'object' type, 'additionalProperties' must be "
        "explicitly set to false"
    ]
    # pydantic's own schema, untransformed: bounds and defaults are not supported.
    problems = claude({"type": "json_schema", "schema": Order.model_json_schema()})
    assert (
        "output_config.format.schema.properties.note: the keyword 'default' is not supported"
        in (" ".join(problems))
    )
    assert any(
        "'minItems' values other than 0 and 1" in p
        for p in claude(
            {
                "type": "json_schema",
                "schema": {"type": "array", "items": {"type": "string"}, "minItems": 2},
            }
        )
    )


async def test_a_refused_format_is_the_apis_400(
    fake_llm: FakeLLMServer, protocol: str, collect: Collect
) -> None:
    fake_llm.allow_violations = True
    fake_llm.script({"text": "never sent"})
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    if protocol == "anthropic":
        bad: dict[str, Any] = {
            "output_config": {"format": {"type": "json_schema", "schema": schema}}
        }
    elif protocol == "openai-chat":
        spec = {"name": "X", "schema": schema, "strict": True}
        bad = {"response_format": {"type": "json_schema", "json_schema": spec}}
    else:
        bad = {
            "text": {
                "format": {"type": "json_schema", "name": "X", "schema": schema, "strict": True}
            }
        }
    error_class = anthropic.BadRequestError if protocol == "anthropic" else openai.BadRequestError
    with pytest.raises(error_class, match="additionalProperties"):
        await collect(**bad)
    assert len(fake_llm.violations) == 1
    assert fake_llm.remaining == 1
