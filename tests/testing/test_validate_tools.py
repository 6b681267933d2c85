"""The tool rules of the request checker: names and schemas each real API refuses with a 400,
checked on the bodies drover's provider adapters build."""

from __future__ import annotations

import pytest
from support.tool_rules import PROTOCOLS
from support.tool_rules import tool_problems as problems

GOOD = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_plain_tool_passes(protocol: str) -> None:
    schema = {**GOOD, "$schema": "http://json-schema.org/draft-07/schema#"}
    assert problems(protocol, "mcp__files__read-file", schema) == []


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_name_with_other_characters_is_refused(protocol: str) -> None:
    (problem,) = problems(protocol, "mcp__my server__read.file", GOOD)
    assert "pattern" in problem and "name" in problem


def test_names_longer_than_64_are_refused_by_openai_only() -> None:
    name = "mcp__" + "x" * 70
    assert problems("anthropic", name, GOOD) == []
    assert problems("openai", name, GOOD) == [
        "Invalid 'tools[0].function.name': string too long. Expected a string with maximum "
        "length 64, but got a string with length 75 instead."
    ]
    assert problems("openai-responses", name, GOOD)[0].startswith("Invalid 'tools[0].name'")


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_top_level_any_of_is_refused(protocol: str) -> None:
    schema = {"type": "object", "anyOf": [GOOD, {"type": "object", "properties": {}}]}
    (problem,) = problems(protocol, "t", schema)
    assert "top level" in problem


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_root_must_be_an_object(protocol: str) -> None:
    assert problems(protocol, "t", {"type": "string"}) != []


def test_openai_wants_items_on_every_array_and_properties_at_the_root() -> None:
    schema = {
        "type": "object",
        "properties": {"tags": {"type": "array"}, "m": {"type": "object"}},
    }
    assert problems("anthropic", "t", schema) == []
    assert problems("openai", "t", schema) == [
        "Invalid schema for function 't': In context=('properties', 'tags'), array schema "
        "missing items."
    ]
    assert problems("openai-responses", "t", {"type": "object"}) == [
        "Invalid schema for function 't': In context=(), object schema missing properties."
    ]


def test_openai_wants_every_property_to_be_a_schema() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}, "type": "object"}}
    assert problems("openai", "t", schema) == [
        "Invalid schema for function 't': In context=('properties',), 'object' is not of type "
        "'object', 'boolean'."
    ]


def test_enum_values_are_not_taken_for_schemas() -> None:
    schema = {
        "type": "object",
        "properties": {"x": {"enum": [{"type": "array"}], "default": {"type": "array"}}},
    }
    assert problems("openai", "t", schema) == []
