"""The @tool decorator: schemas derived from type hints, docstrings, and argument validation."""

from __future__ import annotations

from typing import Any, Literal, Optional

import pytest

from drover.errors import ToolError
from drover.tools.base import Tool, ToolContext, ToolOutput
from drover.tools.decorator import FunctionTool, tool
from drover.tools.workspace import MAX_OUTPUT_CHARS


def schema_of(fn: Any) -> dict[str, Any]:
    built = tool(fn)
    return dict(built.input_schema)


def prop(annotation: str) -> dict[str, Any]:
    """The property schema of a one-parameter tool whose parameter has this annotation."""
    namespace: dict[str, Any] = {
        "ToolContext": ToolContext,
        "Literal": Literal,
        "Optional": Optional,
        "Any": Any,
    }
    exec(
        f"async def f(ctx: ToolContext, x: {annotation}) -> str:\n    '''Probe.'''\n    return ''",
        namespace,
    )
    schema = schema_of(namespace["f"])
    assert schema["required"] == ["x"]
    return dict(schema["properties"]["x"])


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [
        ("str", {"type": "string"}),
        ("int", {"type": "integer"}),
        ("float", {"type": "number"}),
        ("bool", {"type": "boolean"}),
        ("list[str]", {"type": "array", "items": {"type": "string"}}),
        ("list[int]", {"type": "array", "items": {"type": "integer"}}),
        ("dict[str, int]", {"type": "object", "additionalProperties": {"type": "integer"}}),
        (
            "dict[str, list[bool]]",
            {
                "type": "object",
                "additionalProperties": {"type": "array", "items": {"type": "boolean"}},
            },
        ),
        ("Literal['a', 'b']", {"type": "string", "enum": ["a", "b"]}),
        ("Literal[1, 2]", {"type": "integer", "enum": [1, 2]}),
        ("Literal['a', 1]", {"enum": ["a", 1]}),
        ("str | None", {"anyOf": [{"type": "string"}, {"type": "null"}]}),
        ("Optional[int]", {"anyOf": [{"type": "integer"}, {"type": "null"}]}),
        ("int | str", {"anyOf": [{"type": "integer"}, {"type": "string"}]}),
        ("Any", {}),
    ],
)
def test_schema_for_each_supported_type(annotation: str, expected: dict[str, Any]) -> None:
    assert prop(annotation) == expected


async def example(
    ctx: ToolContext,
    a: str,
    b: int = 3,
    c: list[str] | None = None,
    mode: Literal["fast", "slow"] = "fast",
    ratio: float = 0.5,
) -> str:
    """Do the example thing.

    This second paragraph is not part of the description.

    Args:
        a: The first argument,
            described on two lines.
        b (int): How many.
        c: Optional names.

    Returns:
        Nothing of note.
    """
    return f"{a}|{b}|{c}|{mode}|{ratio}"


def test_full_schema_with_defaults_and_arg_docs() -> None:
    built = tool(read_only=True)(example)
    assert built.name == "example"
    assert built.read_only
    assert built.description == "Do the example thing."
    assert built.input_schema == {
        "type": "object",
        "properties": {
            "a": {"type": "string", "description": "The first argument, described on two lines."},
            "b": {"type": "integer", "description": "How many.", "default": 3},
            "c": {"type": "array", "items": {"type": "string"}, "description": "Optional names."},
            "mode": {"type": "string", "enum": ["fast", "slow"], "default": "fast"},
            "ratio": {"type": "number", "default": 0.5},
        },
        "required": ["a"],
        "additionalProperties": False,
    }


def test_name_and_description_can_be_given() -> None:
    built = tool(name="other", description="Custom.")(example)
    assert (built.name, built.description, built.read_only) == ("other", "Custom.", False)


def test_first_paragraph_may_span_lines() -> None:
    async def wrapped(ctx: ToolContext) -> str:
        """One sentence
        that wraps.

        More.
        """
        return ""

    assert tool(wrapped).description == "One sentence that wraps."


def test_a_built_tool_satisfies_the_protocol() -> None:
    built: Tool = tool(example)
    assert isinstance(built, FunctionTool)


def test_input_schema_is_a_copy() -> None:
    built = tool(example)
    built.input_schema["properties"]["a"]["type"] = "integer"
    assert built.input_schema["properties"]["a"]["type"] == "string"


async def test_run_calls_the_function_with_defaults(ctx: ToolContext) -> None:
    out = await tool(example).run({"a": "x"}, ctx)
    assert out == ToolOutput(content="x|3|None|fast|0.5")


async def test_run_passes_converted_values(ctx: ToolContext) -> None:
    built = tool(example)
    out = await built.run({"a": "x", "b": 4.0, "c": ["p"], "mode": "slow", "ratio": 2}, ctx)
    assert out.content == "x|4|['p']|slow|2.0"


async def test_null_for_an_optional_argument_means_default(ctx: ToolContext) -> None:
    out = await tool(example).run({"a": "x", "b": None, "c": None}, ctx)
    assert out.content == "x|3|None|fast|0.5"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({}, "missing required argument 'a'"),
        ({"a": 1}, "argument 'a' must be a string, got an integer (1)"),
        ({"a": "x", "b": "3"}, "argument 'b' must be an integer, got a string (\"3\")"),
        ({"a": "x", "b": True}, "argument 'b' must be an integer, got true"),
        ({"a": "x", "b": 1.5}, "argument 'b' must be an integer, got a number (1.5)"),
        ({"a": "x", "c": "p"}, "argument 'c' must be an array"),
        ({"a": "x", "c": ["p", 2]}, "argument 'c' item 1 must be a string"),
        ({"a": "x", "mode": "medium"}, 'argument \'mode\' must be one of "fast", "slow"'),
        ({"a": "x", "ratio": "high"}, "argument 'ratio' must be a number"),
        ({"a": "x", "extra": 1}, "unknown argument 'extra' (expected arguments: a, b, c, mode"),
    ],
)
async def test_invalid_arguments_raise_tool_error(
    ctx: ToolContext, args: dict[str, Any], message: str
) -> None:
    calls: list[dict[str, Any]] = []

    async def spy(ctx: ToolContext, **kwargs: Any) -> str:
        calls.append(kwargs)
        return ""

    built = tool(example)
    built.fn = spy
    with pytest.raises(ToolError) as raised:
        await built.run(args, ctx)
    assert str(raised.value).startswith("invalid input for tool 'example': ")
    assert message in str(raised.value)
    assert calls == []


async def test_every_problem_is_reported_at_once(ctx: ToolContext) -> None:
    with pytest.raises(ToolError) as raised:
        await tool(example).run({"b": "x", "zzz": 1}, ctx)
    text = str(raised.value)
    assert "unknown argument 'zzz'" in text
    assert "missing required argument 'a'" in text
    assert "argument 'b' must be an integer" in text


async def test_non_object_input_is_refused(ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match="expected a JSON object of arguments"):
        await tool(example).run(["a"], ctx)  # type: ignore[arg-type]


async def test_dict_and_nullable_values_are_checked(ctx: ToolContext) -> None:
    @tool
    async def take(ctx: ToolContext, m: dict[str, int], n: str | None) -> str:
        """Take."""
        return f"{m}|{n}"

    assert (await take.run({"m": {"k": 1}, "n": None}, ctx)).content == "{'k': 1}|None"
    with pytest.raises(ToolError, match="argument 'm' key 'k' must be an integer"):
        await take.run({"m": {"k": "1"}, "n": "x"}, ctx)
    with pytest.raises(ToolError, match="missing required argument 'n'"):
        await take.run({"m": {}}, ctx)


async def test_literal_does_not_confuse_true_with_one(ctx: ToolContext) -> None:
    @tool
    async def pick(ctx: ToolContext, level: Literal[1, 2]) -> str:
        """Pick."""
        return str(level)

    assert (await pick.run({"level": 2}, ctx)).content == "2"
    with pytest.raises(ToolError, match="must be one of 1, 2"):
        await pick.run({"level": True}, ctx)


async def test_tool_output_results_pass_through_and_strings_are_capped(ctx: ToolContext) -> None:
    @tool
    async def failing(ctx: ToolContext) -> ToolOutput:
        """Fail softly."""
        return ToolOutput(content="bad", is_error=True)

    @tool
    async def huge(ctx: ToolContext) -> str:
        """Talk a lot."""
        return "x" * (MAX_OUTPUT_CHARS * 2)

    assert await failing.run({}, ctx) == ToolOutput(content="bad", is_error=True)
    out = await huge.run({}, ctx)
    assert out.truncated
    assert len(out.content) < MAX_OUTPUT_CHARS + 200


def test_bare_decorator_uses_function_name() -> None:
    @tool
    async def bare(ctx: ToolContext) -> str:
        """Bare."""
        return ""

    assert bare.name == "bare"
    assert not bare.read_only
    assert bare.input_schema == {
        "type": "object",
        "properties": {},
        "required": [],
        "additionalProperties": False,
    }


def test_undescribable_functions_are_refused_at_decoration() -> None:
    async def no_doc(ctx: ToolContext) -> str:
        return ""

    async def no_ctx(a: str) -> str:
        """Doc."""
        return ""

    async def no_hint(ctx: ToolContext, a) -> str:  # type: ignore[no-untyped-def]
        """Doc."""
        return ""

    async def bad_type(ctx: ToolContext, a: set[str]) -> str:
        """Doc."""
        return ""

    async def bad_keys(ctx: ToolContext, a: dict[int, str]) -> str:
        """Doc."""
        return ""

    async def var_kw(ctx: ToolContext, **a: str) -> str:
        """Doc."""
        return ""

    def not_async(ctx: ToolContext) -> str:
        """Doc."""
        return ""

    cases: list[tuple[Any, str]] = [
        (no_doc, "needs a description"),
        (no_ctx, "first parameter must be `ctx: ToolContext`"),
        (no_hint, "needs a type hint"),
        (bad_type, "unsupported parameter type"),
        (bad_keys, "dict keys must be str"),
        (var_kw, "not supported"),
        (not_async, "must be an async function"),
    ]
    for fn, message in cases:
        with pytest.raises(TypeError, match=message):
            tool(fn)


def test_documenting_an_unknown_parameter_is_refused() -> None:
    async def typo(ctx: ToolContext, path: str) -> str:
        """Doc.

        Args:
            pth: A typo.
        """
        return ""

    with pytest.raises(TypeError, match="documents unknown parameters"):
        tool(typo)
