"""The ``@tool`` decorator: a typed ``async def`` becomes a :class:`~drover.tools.base.Tool`.

The JSON schema offered to the model is derived from the function's type hints, and the
arguments the model sends are checked against the same hints before the function runs, so a
tool body can trust its parameters. Supported parameter types: ``str``, ``int``, ``float``,
``bool``, ``list[T]``, ``dict[str, T]``, ``Literal[...]``, ``X | None`` / ``Optional[X]``,
other unions of these, and ``Any``. A parameter with a default is optional.

The description is the docstring's first paragraph; per-parameter descriptions come from a
Google-style ``Args:`` section::

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
import types
import typing
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Union, get_args, get_origin

from drover.errors import ToolError
from drover.tools.base import ToolContext, ToolOutput
from drover.tools.workspace import cap_output

ToolFunction = Callable[..., Awaitable[str | ToolOutput]]

_JSON_TYPE_NAMES = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "a boolean",
    "array": "an array",
    "object": "an object",
    "null": "null",
}


# -- type hints → JSON schema, and a checker per hint ------------------------------------------


def _describe_value(value: object) -> str:
    kind = _json_kind(value)
    if kind in ("null", "boolean"):
        return json.dumps(value)
    shown = json.dumps(value, default=str, ensure_ascii=False)
    if len(shown) > 40:
        shown = shown[:37] + "..."
    return f"{_JSON_TYPE_NAMES.get(kind, kind)} ({shown})"


def _json_kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


class _Invalid(Exception):
    """One argument value does not match its hint; the message completes 'argument X …'."""


@dataclass(frozen=True, slots=True)
class _Type:
    """A supported hint: its JSON schema and a checker that returns the (converted) value."""

    schema: dict[str, Any]
    check: Callable[[object], object]
    #: For ``X | None``: the type without ``None`` (what an optional parameter advertises).
    non_null: _Type | None = None

    @property
    def nullable(self) -> bool:
        return self.non_null is not None


def _scalar(json_type: str, accept: Callable[[object], object | None]) -> _Type:
    def check(value: object) -> object:
        converted = accept(value)
        if converted is None:
            raise _Invalid(f"must be {_JSON_TYPE_NAMES[json_type]}, got {_describe_value(value)}")
        return converted

    return _Type({"type": json_type}, check)


def _accept_str(value: object) -> object | None:
    return value if isinstance(value, str) else None


def _accept_bool(value: object) -> object | None:
    return value if isinstance(value, bool) else None


def _accept_int(value: object) -> object | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    # JSON has one number type; 3.0 is a fine way to say 3.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _accept_float(value: object) -> object | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    return None


_SCALARS: dict[object, _Type] = {
    str: _scalar("string", _accept_str),
    int: _scalar("integer", _accept_int),
    float: _scalar("number", _accept_float),
    bool: _scalar("boolean", _accept_bool),
}


def _list_type(item: _Type) -> _Type:
    def check(value: object) -> object:
        if not isinstance(value, list | tuple):
            raise _Invalid(f"must be an array, got {_describe_value(value)}")
        out = []
        for i, element in enumerate(value):
            try:
                out.append(item.check(element))
            except _Invalid as exc:
                raise _Invalid(f"item {i} {exc}") from None
        return out

    return _Type({"type": "array", "items": item.schema}, check)


def _dict_type(value_type: _Type) -> _Type:
    def check(value: object) -> object:
        if not isinstance(value, Mapping):
            raise _Invalid(f"must be an object, got {_describe_value(value)}")
        out = {}
        for key, element in value.items():
            if not isinstance(key, str):
                raise _Invalid(f"must have string keys, got key {key!r}")
            try:
                out[key] = value_type.check(element)
            except _Invalid as exc:
                raise _Invalid(f"key {key!r} {exc}") from None
        return out

    return _Type({"type": "object", "additionalProperties": value_type.schema}, check)


def _literal_type(values: tuple[object, ...]) -> _Type:
    for value in values:
        if not isinstance(value, str | int | float | bool) and value is not None:
            raise TypeError(f"unsupported Literal value {value!r}")
    kinds = {_json_kind(v) for v in values}
    schema: dict[str, Any] = {"type": kinds.pop()} if len(kinds) == 1 else {}
    schema["enum"] = list(values)

    def check(value: object) -> object:
        # Compare type as well as value, so True does not pass for 1.
        for allowed in values:
            if type(allowed) is type(value) and allowed == value:
                return value
        options = ", ".join(json.dumps(v) for v in values)
        raise _Invalid(f"must be one of {options}, got {_describe_value(value)}")

    return _Type(schema, check)


def _union_type(members: list[_Type]) -> _Type:
    def check(value: object) -> object:
        problems = []
        for member in members:
            try:
                return member.check(value)
            except _Invalid as exc:
                problems.append(str(exc))
        raise _Invalid(" or ".join(problems))

    return _Type({"anyOf": [m.schema for m in members]}, check)


def _null_check(value: object) -> object:
    if value is not None:
        raise _Invalid(f"must be null, got {_describe_value(value)}")
    return None


def _any_check(value: object) -> object:
    return value


def _type_for(hint: object) -> _Type:
    """The schema and checker for a type hint; ``TypeError`` for an unsupported one."""
    if hint is Any:
        return _Type({}, _any_check)
    if hint in _SCALARS:
        return _SCALARS[hint]
    origin = get_origin(hint)
    args = get_args(hint)
    if origin is list:
        (item,) = args or (Any,)
        return _list_type(_type_for(item))
    if origin is dict:
        key, value = args or (str, Any)
        if key is not str:
            raise TypeError(f"dict keys must be str for a JSON schema, not {key!r}")
        return _dict_type(_type_for(value))
    if origin is Literal:
        return _literal_type(args)
    if origin is Union or origin is types.UnionType:
        members = [a for a in args if a is not type(None)]
        nullable = len(members) < len(args)
        inner = (
            _type_for(members[0])
            if len(members) == 1
            else _union_type([_type_for(m) for m in members])
        )
        if not nullable:
            return inner
        null = _Type({"type": "null"}, _null_check)
        both = _union_type([inner, null])
        return _Type(both.schema, both.check, non_null=inner)
    raise TypeError(f"unsupported parameter type {hint!r} for a tool")


# -- docstrings --------------------------------------------------------------------------------

_SECTION = re.compile(r"^(Args|Arguments|Parameters|Returns|Raises|Yields|Examples?|Notes?):\s*$")
_ARG_LINE = re.compile(r"^(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def _parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """The first paragraph, and the per-parameter descriptions of an ``Args:`` section."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    summary: list[str] = []
    for line in lines:
        if not line.strip() or _SECTION.match(line.strip()):
            break
        summary.append(line.strip())
    params: dict[str, str] = {}
    in_args = False
    entry_indent: int | None = None
    current: str | None = None
    for line in lines:
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        section = _SECTION.match(stripped)
        if section and indent == 0:
            in_args = section.group(1) in ("Args", "Arguments", "Parameters")
            entry_indent, current = None, None
            continue
        if not in_args or not stripped:
            continue
        if indent == 0:
            in_args = False
            continue
        if entry_indent is None:
            entry_indent = indent
        match = _ARG_LINE.match(stripped)
        if indent == entry_indent and match:
            current = match.group(1).lstrip("*")
            params[current] = match.group(2).strip()
        elif current is not None:
            params[current] = f"{params[current]} {stripped}".strip()
    return " ".join(summary), params


# -- the tool ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Param:
    name: str
    type: _Type
    required: bool
    default: object


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
        self._params = _params_of(fn, self._name)
        unknown_docs = set(arg_docs) - {p.name for p in self._params} - {"ctx"}
        if unknown_docs:
            raise TypeError(f"tool {self._name!r} documents unknown parameters {unknown_docs}")
        self._schema = _schema_of(self._params, arg_docs)

    @property
    def name(self) -> str:
        return self._name

    @property
    def description(self) -> str:
        return self._description

    @property
    def input_schema(self) -> dict[str, Any]:
        # A copy: providers may adapt the schema they send without touching the tool's.
        return copy.deepcopy(self._schema)

    @property
    def read_only(self) -> bool:
        return self._read_only

    def validate(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Check ``args`` against the parameter hints; the converted arguments, or ``ToolError``."""
        if not isinstance(args, Mapping):
            raise ToolError(
                f"invalid input for tool '{self._name}': expected a JSON object of arguments, "
                f"got {_describe_value(args)}"
            )
        problems: list[str] = []
        known = {p.name for p in self._params}
        for key in args:
            if key not in known:
                expected = ", ".join(p.name for p in self._params) or "none"
                problems.append(f"unknown argument '{key}' (expected arguments: {expected})")
        values: dict[str, Any] = {}
        for param in self._params:
            if param.name not in args:
                if param.required:
                    problems.append(f"missing required argument '{param.name}'")
                continue
            value = args[param.name]
            if value is None and not param.required and not param.type.nullable:
                continue  # an explicit null for an optional argument means "use the default"
            try:
                values[param.name] = param.type.check(value)
            except _Invalid as exc:
                problems.append(f"argument '{param.name}' {exc}")
        if problems:
            raise ToolError(f"invalid input for tool '{self._name}': " + "; ".join(problems))
        return values

    async def run(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        values = self.validate(args)
        result = await self.fn(ctx, **values)
        if isinstance(result, ToolOutput):
            return result
        if isinstance(result, str):
            return cap_output(result)
        raise TypeError(f"tool {self._name!r} returned {type(result).__name__}, not str/ToolOutput")

    def __repr__(self) -> str:
        return f"<tool {self._name}{' (read-only)' if self._read_only else ''}>"


def _params_of(fn: ToolFunction, tool_name: str) -> list[_Param]:
    signature = inspect.signature(fn)
    try:
        hints = typing.get_type_hints(fn)
    except NameError as exc:
        raise TypeError(f"tool {tool_name!r}: cannot resolve a type hint ({exc})") from None
    parameters = list(signature.parameters.values())
    if not parameters or hints.get(parameters[0].name) is not ToolContext:
        raise TypeError(f"tool {tool_name!r}: the first parameter must be `ctx: ToolContext`")
    params: list[_Param] = []
    for parameter in parameters[1:]:
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise TypeError(f"tool {tool_name!r}: *args and **kwargs are not supported")
        if parameter.kind is parameter.POSITIONAL_ONLY:
            raise TypeError(f"tool {tool_name!r}: positional-only parameters are not supported")
        if parameter.name not in hints:
            raise TypeError(f"tool {tool_name!r}: parameter {parameter.name!r} needs a type hint")
        try:
            param_type = _type_for(hints[parameter.name])
        except TypeError as exc:
            raise TypeError(f"tool {tool_name!r}, parameter {parameter.name!r}: {exc}") from None
        required = parameter.default is parameter.empty
        params.append(_Param(parameter.name, param_type, required, parameter.default))
    return params


def _schema_of(params: list[_Param], arg_docs: Mapping[str, str]) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    for param in params:
        advertised = param.type
        if not param.required and advertised.non_null is not None:
            # Optional anyway: offer the plain type; a null from the model is still accepted.
            advertised = advertised.non_null
        schema = dict(advertised.schema)
        if param.name in arg_docs:
            schema["description"] = arg_docs[param.name]
        if not param.required and param.default is not None:
            try:
                json.dumps(param.default)
            except TypeError:
                pass
            else:
                schema["default"] = param.default
        properties[param.name] = schema
    return {
        "type": "object",
        "properties": properties,
        "required": [p.name for p in params if p.required],
        "additionalProperties": False,
    }


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
    """Turn ``async def f(ctx: ToolContext, ...) -> str | ToolOutput`` into a tool.

    Usable bare (``@tool``) or with options (``@tool(name="x", read_only=True)``). ``name``
    defaults to the function's name and ``description`` to the docstring's first paragraph.
    A ``str`` result becomes a :class:`ToolOutput`, capped to
    :data:`~drover.tools.workspace.MAX_OUTPUT_CHARS`. Bad arguments from the model raise
    :class:`~drover.errors.ToolError` before the function runs; a function that cannot be
    described (no hints, unsupported types, no docstring) raises ``TypeError`` at decoration.
    """

    def wrap(function: ToolFunction) -> FunctionTool:
        return FunctionTool(function, name=name, read_only=read_only, description=description)

    return wrap(fn) if fn is not None else wrap
