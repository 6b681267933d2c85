"""MCP tool schemas and names made acceptable to all three APIs — checked against the request
rules of the fake LLM server's validators, which refuse the originals — and malformed schemas
(fuzzed) refused with a reason, leaving the tool out instead of failing the start."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from cli.helpers import base_args, clean_env, run_drover
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.tool_rules import PROTOCOLS, tool_problems

from drover.mcp.config import parse_server
from drover.mcp.connection import McpConnection
from drover.mcp.schema import SchemaError, adapt_schema
from drover.mcp.tool import McpTool, tool_name
from drover.testing import FakeLLMServer

from .conftest import call

RAW = Path(__file__).resolve().parents[1] / "support" / "raw_mcp.py"

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


# -- malformed schemas: the tool is left out, never the start-up -------------------------------

#: Keywords whose values hold schemas (and some that do not), drawn by the fuzzer.
KEYWORDS = [
    "anyOf",
    "oneOf",
    "allOf",
    "properties",
    "required",
    "type",
    "items",
    "prefixItems",
    "additionalProperties",
    "not",
    "enum",
    "$defs",
    "patternProperties",
]
_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.sampled_from(["object", "array", "string", "a"])
)
_json = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=8,
)
#: Schema-shaped objects whose every part may be anything JSON.
_schemas = st.recursive(
    _json,
    lambda inner: st.dictionaries(
        st.sampled_from(KEYWORDS),
        inner
        | st.lists(inner, max_size=3)
        | st.dictionaries(st.text(max_size=3), inner, max_size=3),
        max_size=4,
    ),
    max_leaves=20,
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_schemas)
def test_any_json_is_adapted_for_every_api_or_refused_with_a_reason(schema: Any) -> None:
    try:
        adapted = adapt_schema(schema)
    except SchemaError as exc:
        said = str(exc)
        assert said, schema
        assert "\n" not in said, said
        return
    json.dumps(adapted)
    for protocol in PROTOCOLS:
        assert tool_problems(protocol, "t", adapted) == [], (protocol, schema, adapted)


@pytest.mark.parametrize(
    ("schema", "said"),
    [
        ({"anyOf": [{"properties": [1, 2]}]}, "anyOf[0].properties is a list"),
        ({"type": "object", "oneOf": [{"required": 5}]}, "oneOf[0].required is not a list"),
        ({"allOf": [{"properties": "x"}]}, "allOf[0].properties is a string"),
        ({"anyOf": 3}, "anyOf is the number 3, not a list of schemas"),
        ({"properties": {"a\nb": {"oneOf": [None]}}}, 'properties["a\\nb"].oneOf[0] is null'),
        ({"properties": {"a": {"type": {"x": 1}}}}, 'properties["a"].type is an object'),
    ],
)
def test_a_malformed_part_is_named(schema: dict[str, Any], said: str) -> None:
    with pytest.raises(SchemaError) as raised:
        adapt_schema(schema)
    assert said in str(raised.value)


def test_nesting_too_deep_is_refused_not_a_recursion_error() -> None:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(5000):
        schema = {"anyOf": [schema]}
    with pytest.raises(SchemaError, match="nested deeper than"):
        adapt_schema({"type": "object", "properties": {"x": schema}})


def test_a_malformed_tool_is_left_out_with_one_line(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    """``drover -p`` with a user-level server one of whose tools has a broken ``anyOf``: the run
    goes on with the server's other tool, saying in one line which tool was left out."""
    tools = [
        {"name": "broken", "inputSchema": {"type": "object", "anyOf": [{"properties": [1]}]}},
        {"name": "where", "inputSchema": {"type": "object", "properties": {}}},
    ]
    server = {
        "command": sys.executable,
        "args": [str(RAW)],
        "env": {"RAW_MCP": json.dumps({"tools": tools})},
        "trust": True,
    }
    config = tmp_path / "config" / "config.toml"
    config.parent.mkdir()
    config.write_text("")
    (config.parent / "mcp.json").write_text(json.dumps({"mcpServers": {"raw": server}}))
    env = clean_env(
        ANTHROPIC_API_KEY="test", XDG_DATA_HOME=str(tmp_path / "data"), DROVER_CONFIG=str(config)
    )
    fake_llm.script({"tool_calls": [call("mcp__raw__where")]}, {"text": "done"})
    done = run_drover([*base_args(fake_llm, tmp_path), "-p", "go"], env=env)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    (line,) = [line for line in done.stderr.splitlines() if "broken" in line]
    assert "MCP server 'raw': its tool 'broken' is left out: anyOf[0].properties is a list" in line
    offered = [tool["name"] for tool in fake_llm.requests[0].body["tools"]]
    assert "mcp__raw__where" in offered and "mcp__raw__broken" not in offered
    assert done.stdout.strip() == "done"
    listed = run_drover(["mcp", "list", "--workdir", str(tmp_path)], env=env)
    assert listed.returncode == 0, listed.stderr  # the server started
    assert "left out: broken: anyOf[0].properties is a list" in listed.stdout
    assert "mcp__raw__where" in listed.stdout
