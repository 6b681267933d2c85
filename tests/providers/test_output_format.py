"""Structured output as each provider asks for it: the same formats the official SDKs build for
``parse(response_format=Model)`` / ``output_format=Model``, and OpenAI's strict mode only where
the schema allows it."""

from __future__ import annotations

import enum
import subprocess
import sys
from typing import Annotated, Literal

import pytest
from anthropic.lib._parse._transform import to_json_output_format
from openai.lib._parsing._completions import type_to_response_format_param
from openai.lib._parsing._responses import type_to_text_format_param
from pydantic import BaseModel, Field, RootModel

from drover.core.output import OutputSchema
from drover.providers.anthropic import anthropic_output_format
from drover.providers.output_format import (
    chat_response_format,
    openai_strict_schema,
    responses_text_format,
)


class Color(enum.Enum):
    red = "red"
    blue = "blue"


class Item(BaseModel):
    """An item."""

    title: str
    qty: Annotated[int, Field(ge=0, description="how many")] = 1


class Order(BaseModel):
    items: list[Item] = Field(min_length=1)
    note: str | None = None
    main: Item = Field(description="the main one")
    backup: Item | None = None
    color: Color = Color.red
    kind: Literal["a", "b"]
    suborders: list[Order] = []


class Tagged(BaseModel):
    tags: dict[str, int]


@pytest.mark.parametrize("model", [Item, Order])
def test_the_formats_are_the_sdks_own(model: type[BaseModel]) -> None:
    spec = OutputSchema.of(model).spec
    assert chat_response_format(spec) == type_to_response_format_param(model)
    assert responses_text_format(spec) == type_to_text_format_param(model)
    assert anthropic_output_format(spec) == to_json_output_format(model)


def test_a_schema_strict_mode_cannot_express_goes_as_it_is() -> None:
    schema = Tagged.model_json_schema()
    assert openai_strict_schema(schema) == (schema, False)
    fmt = chat_response_format(OutputSchema.of(Tagged).spec)
    assert fmt["json_schema"].get("strict") is False
    listed = RootModel[list[int]].model_json_schema()
    assert openai_strict_schema(listed) == (listed, False)


def test_the_given_schema_is_left_unchanged() -> None:
    schema = Order.model_json_schema()
    before = repr(schema)
    strict, ok = openai_strict_schema(schema)
    assert ok and strict["additionalProperties"] is False
    assert repr(schema) == before


@pytest.mark.parametrize(
    ("module", "other"),
    [("drover.providers.openai_chat", "anthropic"), ("drover.providers.anthropic", "openai")],
)
def test_a_protocols_structured_output_loads_no_other_sdk(module: str, other: str) -> None:
    code = f"import sys, {module}\nprint({other!r} in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
