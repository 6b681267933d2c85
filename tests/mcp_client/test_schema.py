"""MCP tool schemas and names made acceptable to all three APIs — checked against the request
rules of the fake LLM server's validators, which refuse the originals."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from support.tool_rules import PROTOCOLS, tool_problems

from drover.mcp.config import parse_server
from drover.mcp.connection import McpConnection
from drover.mcp.schema import adapt_schema
from drover.mcp.tool import McpTool, tool_name

#: Schemas MCP servers publish that some API refuses (each seen in the wild).
REFUSED: dict[str, dict[str, Any]] = {
    "top-level oneOf": {
        "type": "object",
        "oneOf": [
            {"properties": {"id": {"type": "string"}}, "required": ["id"]},
            {"properties": {"path": {"type": "string"}}, "required": ["path"]},
        ],
    },
    "top-level allOf without type": {
        "allOf": [
            {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
            {"type": "object", "properties": {"b": {"type": "integer"}}, "required": ["b"]},
        ]
    },
    "array without items": {
        "type": "object",
        "properties": {
            "tags": {"type": "array", "description": "tags"},
            "nested": {"type": "object", "properties": {"ids": {"type": ["array", "null"]}}},
        },
    },
    "object without properties": {"type": "object"},
    "a property that is not a schema": {
        "type": "object",
        "properties": {"filePath": {"type": "string"}, "type": "object"},
    },
    "no schema at all": {},
}


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("case", list(REFUSED))
def test_adapted_schemas_pass_every_api(case: str, protocol: str) -> None:
    assert tool_problems(protocol, "t", adapt_schema(REFUSED[case])) == []


@pytest.mark.parametrize("case", list(REFUSED))
def test_each_refused_schema_is_refused_by_some_api(case: str) -> None:
    """(So the test above tests the adaptation, not a lenient checker.)"""
    assert any(tool_problems(p, "t", REFUSED[case]) for p in PROTOCOLS)


def test_a_schema_every_api_takes_passes_unchanged() -> None:
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {
            "paths": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            "mode": {"enum": ["a", "b"], "default": "a"},
            "opts": {"type": "object", "properties": {}, "additionalProperties": True},
        },
        "required": ["paths"],
        "additionalProperties": False,
    }
    assert adapt_schema(schema) == schema


def test_merged_branches_require_what_every_branch_requires() -> None:
    merged = adapt_schema(
        {
            "anyOf": [
                {"properties": {"a": {"type": "string"}, "b": {}}, "required": ["a", "b"]},
                {"properties": {"a": {"type": "string"}, "c": {}}, "required": ["a"]},
            ]
        }
    )
    assert merged == {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {}, "c": {}},
        "required": ["a"],
    }
    all_of = adapt_schema(REFUSED["top-level allOf without type"])
    assert all_of["required"] == ["a", "b"]


def test_values_that_only_look_like_schemas_are_left_alone() -> None:
    schema = {
        "type": "object",
        "properties": {"x": {"default": {"type": "array"}, "examples": [{"type": "object"}]}},
    }
    assert adapt_schema(schema) == schema


def test_the_original_is_not_changed() -> None:
    original = {"type": "object", "properties": {"t": {"type": "array"}}}
    adapt_schema(original)
    assert original == {"type": "object", "properties": {"t": {"type": "array"}}}


@pytest.mark.parametrize(
    ("server", "tool", "expected"),
    [
        ("everything", "get-sum", "mcp__everything__get-sum"),
        ("files", "read_file", "mcp__files__read_file"),
    ],
)
def test_names_as_every_mcp_client_writes_them(server: str, tool: str, expected: str) -> None:
    assert tool_name(server, tool) == expected


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_names_no_api_takes_are_made_valid_and_kept_apart(protocol: str) -> None:
    names = {
        tool_name("my server", "read.file"),
        tool_name("my_server", "read_file"),
        tool_name("s" * 40, "t" * 40),
        tool_name("s" * 40, "t" * 41),
        tool_name("ünï", "tool/with/slashes"),
    }
    assert len(names) == 5
    for name in names:
        assert tool_problems(protocol, name, {"type": "object", "properties": {}}) == []


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_an_mcp_tool_offers_the_adapted_schema(tmp_path: Path, protocol: str) -> None:
    config = parse_server("my.server", {"command": "x"}, "f.json", {})
    connection = McpConnection(config, workdir=tmp_path, log_dir=tmp_path)
    spec = types.Tool(name="find/files", input_schema=REFUSED["top-level oneOf"])
    tool = McpTool(connection, spec)
    assert tool_problems(protocol, tool.name, tool.input_schema) == []
    assert tool.input_schema["properties"] == {"id": {"type": "string"}, "path": {"type": "string"}}
