"""The ``@tool`` decorator: a typed ``async def`` becomes a :class:`~drover.tools.base.Tool`.

The parameters after ``ctx`` become a pydantic model: its JSON schema is what the model is
offered, and the arguments the model sends are validated by it before the function runs, so a
tool body can trust its parameters. Any type pydantic can validate and describe in JSON schema
works — ``str``, numbers, ``bool``, ``list[T]``, ``dict[str, T]``, ``Literal[...]``, unions,
``X | None``, enums, dates, pydantic models — and ``Annotated[T, Field(...)]`` adds
constraints and descriptions. A parameter with a default is optional.

Arguments are validated as the JSON they came as, strictly (``"3"`` is not an integer, ``true``
is not a string; a date may be an ISO string, a model an object). An invalid call becomes a
:class:`~drover.errors.ToolError` — a tool result with ``is_error`` the model can correct —
listing each of pydantic's messages with where it applies.

The description is the docstring's first paragraph; per-parameter descriptions come from its
parameter section, Google (``Args:``), NumPy (``Parameters``) or Sphinx (``:param x:``) style
(a description given in ``Field(description=...)`` wins)::

    @tool(read_only=True)
    async def count(ctx: ToolContext, path: str, pattern: str = "") -> str:
        \"\"\"Count the lines of a file.

        Args:
            path: The file, relative to the working directory.
            pattern: Only count lines containing this text.
        \"\"\"
"""

from __future__ import annotations

import copy
import inspect
import json
import re
import typing
from collections.abc import Awaitable, Callable, Mapping
from typing import Annotated, Any, get_args, get_origin

import docstring_parser
import pydantic
from pydantic.fields import FieldInfo

from drover.core.output import describe_validation_error
from drover.errors import ToolError
from drover.tools.base import ToolContext, ToolOutput
from drover.tools.workspace import cap_output

ToolFunction = Callable[..., Awaitable[str | ToolOutput]]

#: Lines that open a docstring section rather than continue the first paragraph.
_SECTION = re.compile(
    r"^(?:(?:Args|Arguments|Parameters|Params|Returns|Raises|Yields|Examples?|Notes?)\s*:?"
    r"|[:@]\w+.*|-{3,})$"
)
#: Schema keys whose values are data, not schemas (cleaning must not touch them).
_DATA_KEYS = frozenset({"default", "enum", "const", "examples"})
#: Schema keys whose values map names to schemas.
_NAMED_SCHEMAS = frozenset({"properties", "$defs", "definitions", "patternProperties"})


# -- docstrings --------------------------------------------------------------------------------


def _parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """The first paragraph, and the per-parameter descriptions of any docstring style."""
    if not doc:
        return "", {}
    summary: list[str] = []
    for line in inspect.cleandoc(doc).splitlines():
        stripped = line.strip()
        if not stripped or _SECTION.match(stripped):
            break
        summary.append(stripped)
    parsed = docstring_parser.parse(doc)
    params = {
        p.arg_name.lstrip("*"): " ".join((p.description or "").split()) for p in parsed.params
    }
    return " ".join(summary), params


# -- the argument model ------------------------------------------------------------------------


def _has_description(hint: object) -> bool:
    """Whether ``Annotated[..., Field(description=...)]`` already describes the parameter."""
    if get_origin(hint) is not Annotated:
        return False
    return any(isinstance(m, FieldInfo) and m.description for m in get_args(hint)[1:])


def _accepts_none(hint: Any) -> bool:
    try:
        pydantic.TypeAdapter(hint).validate_python(None)
    except pydantic.ValidationError:
        return False
    return True


def _clean(node: Any) -> Any:
    """The schema without pydantic's generated ``title`` keys (noise to a model)."""
    if isinstance(node, list):
        return [_clean(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in _DATA_KEYS:
            out[key] = value
        elif key in _NAMED_SCHEMAS and isinstance(value, dict):
            out[key] = {name: _clean(schema) for name, schema in value.items()}
        else:
            out[key] = _clean(value)
    return out


def _plain_optional(schema: dict[str, Any]) -> dict[str, Any]:
    """``{"anyOf": [T, null], "default": null}`` → ``T``: an optional parameter is offered as
    its type (a null from the model still means "use the default")."""
    members = schema.get("anyOf")
    if not isinstance(members, list) or schema.get("default", 0) is not None:
        return schema
    kept = [m for m in members if m != {"type": "null"}]
    if len(kept) != 1 or len(kept) == len(members):
        return schema
    rest = {k: v for k, v in schema.items() if k not in ("anyOf", "default")}
    return {**kept[0], **rest}


class _Arguments:
    """The pydantic model of a tool's parameters, and what the model is told about it."""

    def __init__(self, fn: ToolFunction, tool_name: str, arg_docs: Mapping[str, str]) -> None:
        signature = inspect.signature(fn)
        try:
            hints = typing.get_type_hints(fn, include_extras=True)
        except NameError as exc:
            raise TypeError(f"tool {tool_name!r}: cannot resolve a type hint ({exc})") from None
        parameters = list(signature.parameters.values())
        first = hints.get(parameters[0].name) if parameters else None
        if first is not ToolContext and get_origin(first) is not ToolContext:
            raise TypeError(
                f"tool {tool_name!r}: the first parameter must be `ctx: ToolContext` "
                "(or `ToolContext[Deps]`)"
            )
        fields: dict[str, Any] = {}
        #: Optional parameters that do not accept None: a null for them means the default.
        self.null_means_default: set[str] = set()
        for parameter in parameters[1:]:
            if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
                raise TypeError(f"tool {tool_name!r}: *args and **kwargs are not supported")
            if parameter.kind is parameter.POSITIONAL_ONLY:
                raise TypeError(f"tool {tool_name!r}: positional-only parameters are not supported")
            if parameter.name not in hints:
                raise TypeError(
                    f"tool {tool_name!r}: parameter {parameter.name!r} needs a type hint"
                )
            hint = hints[parameter.name]
            doc = arg_docs.get(parameter.name)
            if doc and not _has_description(hint):
                hint = Annotated[hint, pydantic.Field(description=doc)]
            required = parameter.default is parameter.empty
            fields[parameter.name] = (hint, ... if required else parameter.default)
            if not required and not _accepts_none(hints[parameter.name]):
                self.null_means_default.add(parameter.name)
        self.names = list(fields)
        config = pydantic.ConfigDict(extra="forbid", arbitrary_types_allowed=False)
        try:
            self.model: type[pydantic.BaseModel] = pydantic.create_model(
                f"{tool_name}_arguments", __config__=config, **fields
            )
            schema = self.model.model_json_schema()
        except (pydantic.PydanticSchemaGenerationError, pydantic.PydanticUserError) as exc:
            first = str(exc).splitlines()[0]
            raise TypeError(f"tool {tool_name!r}: unsupported parameter type: {first}") from None
        schema = _clean(schema)
        properties = schema.get("properties", {})
        for name in properties.keys() - set(schema.get("required", ())):
            properties[name] = _plain_optional(properties[name])
        schema["properties"] = properties
        schema.setdefault("required", [])
        self.schema: dict[str, Any] = schema

    def validate(self, tool_name: str, args: object) -> dict[str, Any]:
        """The validated arguments by name, or a :class:`ToolError` with pydantic's messages."""
        if isinstance(args, Mapping):
            args = {
                k: v for k, v in args.items() if not (v is None and k in self.null_means_default)
            }
        try:
            text = json.dumps(args)
        except (TypeError, ValueError) as exc:
            raise ToolError(f"invalid input for tool '{tool_name}': not JSON ({exc})") from None
        try:
            values = self.model.model_validate_json(text, strict=True)
        except pydantic.ValidationError as exc:
            problems = describe_validation_error(exc, root="arguments")
            raise ToolError(f"invalid input for tool '{tool_name}': {problems}") from None
        return {name: getattr(values, name) for name in self.names}


# -- the tool ----------------------------------------------------------------------------------


class FunctionTool:
    """A :class:`~drover.tools.base.Tool` backed by an ``async`` function; see :func:`tool`."""

    def __init__(
        self,
        fn: ToolFunction,
        *,
        name: str | None = None,
        read_only: bool = False,
        description: str | None = None,
    ) -> None:
        if not inspect.iscoroutinefunction(fn):
            raise TypeError(f"a tool must be an async function, not {fn!r}")
        self.fn = fn
        self._name = name or fn.__name__
        self._read_only = read_only
        summary, arg_docs = _parse_docstring(inspect.getdoc(fn))
        self._description = description if description is not None else summary
        if not self._description:
            raise TypeError(f"tool {self._name!r} needs a description: a docstring or description=")
        self._arguments = _Arguments(fn, self._name, arg_docs)
        unknown_docs = set(arg_docs) - set(self._arguments.names) - {"ctx"}
        if unknown_docs:
            raise TypeError(f"tool {self._name!r} documents unknown parameters {unknown_docs}")

    @property
    def name(self) -> str:
        return self._name

    @property
    def description(self) -> str:
        return self._description

    @property
    def input_schema(self) -> dict[str, Any]:
        # A copy: providers may adapt the schema they send without touching the tool's.
        return copy.deepcopy(self._arguments.schema)

    @property
    def read_only(self) -> bool:
        return self._read_only

    @property
    def arguments_model(self) -> type[pydantic.BaseModel]:
        """The pydantic model the arguments are validated with."""
        return self._arguments.model

    def validate(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """The validated arguments, or :class:`~drover.errors.ToolError` with pydantic's
        messages."""
        return self._arguments.validate(self._name, args)

    async def run(self, args: Mapping[str, Any], ctx: ToolContext[Any]) -> ToolOutput:
        values = self.validate(args)
        result = await self.fn(ctx, **values)
        if isinstance(result, ToolOutput):
            return result
        if isinstance(result, str):
            return cap_output(result)
        raise TypeError(f"tool {self._name!r} returned {type(result).__name__}, not str/ToolOutput")

    def __repr__(self) -> str:
        return f"<tool {self._name}{' (read-only)' if self._read_only else ''}>"


@typing.overload
def tool(fn: ToolFunction, /) -> FunctionTool: ...


@typing.overload
def tool(
    *, name: str | None = None, read_only: bool = False, description: str | None = None
) -> Callable[[ToolFunction], FunctionTool]: ...


def tool(
    fn: ToolFunction | None = None,
    /,
    *,
    name: str | None = None,
    read_only: bool = False,
    description: str | None = None,
) -> FunctionTool | Callable[[ToolFunction], FunctionTool]:
    """Turn ``async def f(ctx: ToolContext, ...) -> str | ToolOutput`` into a tool
    (``ctx: ToolContext[Deps]`` types ``ctx.deps``, what a run passes as ``deps=``).

    Usable bare (``@tool``) or with options (``@tool(name="x", read_only=True)``). ``name``
    defaults to the function's name and ``description`` to the docstring's first paragraph.
    A ``str`` result becomes a :class:`ToolOutput`, capped to
    :data:`~drover.tools.workspace.MAX_OUTPUT_CHARS`. Bad arguments from the model raise
    :class:`~drover.errors.ToolError` before the function runs; a function that cannot be
    described (no hints, types without a JSON schema, no docstring) raises ``TypeError`` at
    decoration.
    """

    def wrap(function: ToolFunction) -> FunctionTool:
        return FunctionTool(function, name=name, read_only=read_only, description=description)

    return wrap(fn) if fn is not None else wrap
