"""The @tool decorator on pydantic: schemas from type hints and docstrings, validation with
pydantic's messages, pydantic models and ``Annotated[..., Field(...)]`` parameters."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal, Optional

import pytest
from pydantic import BaseModel, Field

from drover.core.sinks import EventRecorder
from drover.errors import ToolError
from drover.testing.scripted import Reply, ScriptedProvider, call
from drover.tools.base import Tool, ToolContext, ToolOutput
from drover.tools.decorator import FunctionTool, tool
from drover.tools.registry import ToolRegistry
from drover.tools.workspace import MAX_OUTPUT_CHARS
from drover.turn.state import AgentSession


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
    out = await built.run({"a": "x", "b": 4, "c": ["p"], "mode": "slow", "ratio": 2}, ctx)
    assert out.content == "x|4|['p']|slow|2.0"


async def test_null_for_an_optional_argument_means_default(ctx: ToolContext) -> None:
    out = await tool(example).run({"a": "x", "b": None, "c": None}, ctx)
    assert out.content == "x|3|None|fast|0.5"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({}, "a: Field required"),
        ({"a": 1}, "a: Input should be a valid string (got 1)"),
        ({"a": "x", "b": "3"}, 'b: Input should be a valid integer (got "3")'),
        ({"a": "x", "b": True}, "b: Input should be a valid integer (got true)"),
        ({"a": "x", "b": 1.5}, "b: Input should be a valid integer (got 1.5)"),
        ({"a": "x", "c": "p"}, 'c: Input should be a valid array (got "p")'),
        ({"a": "x", "c": ["p", 2]}, "c.1: Input should be a valid string (got 2)"),
        ({"a": "x", "mode": "medium"}, "mode: Input should be 'fast' or 'slow' (got \"medium\")"),
        ({"a": "x", "ratio": "high"}, "ratio: Input should be a valid number"),
        ({"a": "x", "extra": 1}, "extra: Extra inputs are not permitted"),
    ],
)
async def test_invalid_arguments_raise_tool_error_with_pydantics_message(
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
    assert "zzz: Extra inputs are not permitted" in text
    assert "a: Field required" in text
    assert "b: Input should be a valid integer" in text


async def test_non_object_input_is_refused(ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match="Input should be an object"):
        await tool(example).run(["a"], ctx)  # type: ignore[arg-type]


async def test_dict_and_nullable_values_are_checked(ctx: ToolContext) -> None:
    @tool
    async def take(ctx: ToolContext, m: dict[str, int], n: str | None) -> str:
        """Take."""
        return f"{m}|{n}"

    assert (await take.run({"m": {"k": 1}, "n": None}, ctx)).content == "{'k': 1}|None"
    with pytest.raises(ToolError, match=r"m\.k: Input should be a valid integer"):
        await take.run({"m": {"k": "1"}, "n": "x"}, ctx)
    with pytest.raises(ToolError, match="n: Field required"):
        await take.run({"m": {}}, ctx)


class Point(BaseModel):
    """A point on the map."""

    x: int
    y: int = 0
    label: Annotated[str, Field(max_length=5, description="A short name.")] = ""


async def test_pydantic_models_and_field_annotations(ctx: ToolContext) -> None:
    @tool
    async def mark(
        ctx: ToolContext,
        where: Point,
        zoom: Annotated[int, Field(ge=1, le=20, description="Map zoom.")] = 10,
        when: datetime.date | None = None,
    ) -> str:
        """Mark a point.

        Args:
            where: The point to mark.
            zoom: Overridden by the Field's description.
        """
        assert isinstance(where, Point)
        return f"{where.x},{where.y},{where.label}|{zoom}|{when}"

    schema = mark.input_schema
    assert schema["properties"]["where"] == {
        "$ref": "#/$defs/Point",
        "description": "The point to mark.",
    }
    assert schema["$defs"]["Point"]["properties"]["label"] == {
        "type": "string",
        "maxLength": 5,
        "description": "A short name.",
        "default": "",
    }
    assert schema["properties"]["zoom"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": 20,
        "description": "Map zoom.",
        "default": 10,
    }
    assert schema["properties"]["when"] == {"type": "string", "format": "date"}
    assert schema["required"] == ["where"]
    out = await mark.run({"where": {"x": 1, "label": "home"}, "when": "2025-02-03"}, ctx)
    assert out.content == "1,0,home|10|2025-02-03"
    with pytest.raises(ToolError) as raised:
        await mark.run({"where": {"x": 1, "label": "too long"}, "zoom": 0}, ctx)
    text = str(raised.value)
    assert "where.label: String should have at most 5 characters" in text
    assert "zoom: Input should be greater than or equal to 1 (got 0)" in text


async def test_a_validation_error_reaches_the_model_as_a_tool_error(tmp_path: Path) -> None:
    @tool(read_only=True)
    async def double(ctx: ToolContext, n: Annotated[int, Field(ge=0)]) -> str:
        """Double a number."""
        return str(2 * n)

    provider = ScriptedProvider(
        [Reply(calls=[call("double", n=-2)]), Reply(calls=[call("double", n=2)]), Reply(text="4")]
    )
    session = AgentSession(provider=provider, tools=ToolRegistry([double]), workdir=tmp_path)
    outcome = await session.run("double -2", EventRecorder())
    assert outcome.event.type == "done"
    first, second = (m.tool_results[0] for m in outcome.added if m.tool_results)
    assert first.is_error
    assert first.content == (
        "invalid input for tool 'double': n: Input should be greater than or equal to 0 (got -2)"
    )
    assert (second.is_error, second.content) == (False, "4")


@pytest.mark.parametrize(
    "style",
    [
        """Google style.

        Args:
            path: The file,
                on two lines.
            count (int): How many.
        """,
        """NumPy style.

        Parameters
        ----------
        path : str
            The file,
            on two lines.
        count : int
            How many.
        """,
        """Sphinx style.

        :param path: The file,
            on two lines.
        :param count: How many.
        """,
    ],
)
def test_parameter_docs_in_each_docstring_style(style: str) -> None:
    async def f(ctx: ToolContext, path: str, count: int = 1) -> str:
        return ""

    f.__doc__ = style
    built = tool(f)
    assert built.description == style.split("\n")[0]
    props = built.input_schema["properties"]
    assert props["path"]["description"] == "The file, on two lines."
    assert props["count"]["description"] == "How many."


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


class Opaque:
    """Not something pydantic can validate."""


def test_undescribable_functions_are_refused_at_decoration() -> None:
    async def no_doc(ctx: ToolContext) -> str:
        return ""

    async def no_ctx(a: str) -> str:
        """Doc."""
        return ""

    async def no_hint(ctx: ToolContext, a) -> str:  # type: ignore[no-untyped-def]
        """Doc."""
        return ""

    async def bad_type(ctx: ToolContext, a: Opaque) -> str:
        """Doc."""
        return ""

    async def no_json_schema(ctx: ToolContext, a: Callable[[], int]) -> str:
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
        (no_json_schema, "unsupported parameter type"),
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
