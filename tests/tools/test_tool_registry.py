"""The tool registry and the public surface of drover.tools."""

from __future__ import annotations

import json

import pytest

import drover.tools
from drover.core.model_stream import ToolSpec
from drover.tools import BashTool, ToolContext, ToolRegistry, default_registry, tool

BUILTINS = ["read_file", "write_file", "edit_file", "bash", "glob", "grep"]


@tool(read_only=True)
async def ping(ctx: ToolContext) -> str:
    """Answer pong."""
    return "pong"


def test_register_get_contains_len() -> None:
    registry = ToolRegistry()
    assert len(registry) == 0
    assert "ping" not in registry
    registry.register(ping)
    assert len(registry) == 1
    assert "ping" in registry
    assert registry.get("ping") is ping
    assert registry.get("nope") is None
    assert registry.names() == ["ping"]
    assert list(registry) == [ping]


def test_duplicate_names_are_refused() -> None:
    registry = ToolRegistry([ping])
    with pytest.raises(ValueError, match="'ping' is already registered"):
        registry.register(ping)


def test_specs_keep_registration_order() -> None:
    @tool
    async def zeta(ctx: ToolContext, word: str) -> str:
        """Last letter.

        Args:
            word: Any word.
        """
        return word

    registry = ToolRegistry([zeta, ping])
    no_args = {"type": "object", "properties": {}, "required": [], "additionalProperties": False}
    one_word = {
        "type": "object",
        "properties": {"word": {"type": "string", "description": "Any word."}},
        "required": ["word"],
        "additionalProperties": False,
    }
    assert registry.specs() == [
        ToolSpec("zeta", "Last letter.", one_word),
        ToolSpec("ping", "Answer pong.", no_args),
    ]


def test_specs_are_stable_and_not_shared() -> None:
    """The same bytes on every call (prompt caching), and a caller that adapts a schema it got
    (as a provider may) changes neither the tool nor the next call's specs."""
    registry = default_registry()
    first = registry.specs()
    sent = json.dumps([(s.name, s.description, s.input_schema) for s in first])
    first[0].input_schema["properties"]["path"]["type"] = "integer"  # type: ignore[index]
    first[0].input_schema["required"].clear()  # type: ignore[union-attr]
    again = json.dumps([(s.name, s.description, s.input_schema) for s in registry.specs()])
    assert again == sent
    assert '"path": {"type": "integer"' not in again


def test_default_registry_holds_the_builtins() -> None:
    registry = default_registry()
    assert registry.names() == BUILTINS
    read_only = {name for name in BUILTINS if registry.get(name).read_only}  # type: ignore[union-attr]
    assert read_only == {"read_file", "glob", "grep"}
    for spec in registry.specs():
        assert spec.description
        assert spec.input_schema["type"] == "object"
        assert spec.input_schema["additionalProperties"] is False


def test_builtin_inputs_are_the_public_contract() -> None:
    inputs = {
        spec.name: (sorted(spec.input_schema["properties"]), spec.input_schema["required"])
        for spec in default_registry().specs()
    }
    assert inputs == {
        "read_file": (["path"], ["path"]),
        "write_file": (["content", "path"], ["path", "content"]),
        "edit_file": (["new_string", "old_string", "path"], ["path", "old_string", "new_string"]),
        "bash": (["command"], ["command"]),
        "glob": (["pattern"], ["pattern"]),
        "grep": (["path", "pattern"], ["pattern"]),
    }


def test_default_registry_is_fresh_each_time() -> None:
    first, second = default_registry(), default_registry()
    assert first is not second
    first.register(ping)
    assert "ping" not in second
    bash = default_registry(bash_timeout=7).get("bash")
    assert isinstance(bash, BashTool)
    assert bash.timeout == 7


def test_public_names() -> None:
    public = {
        name for name in vars(drover.tools) if name.isidentifier() and not name.startswith("_")
    }
    modules = {
        "base",
        "builtin",
        "decorator",
        "limits",
        "protect",
        "registry",
        "sandbox",
        "sandbox_argv",
        "sandbox_bridge",
        "sandbox_home",
        "project_files",
        "sandbox_proxy",
        "sandbox_settings",
        "workspace",
        "annotations",
    }
    assert set(drover.tools.__all__) == public - modules
