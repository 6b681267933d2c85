"""The base of the models of what the HTTP API takes and answers: strict JSON types, no
unknown field, and whatever is wrong with a request refused in one sentence.

The routes validate their bodies and query strings with these models, and :mod:`.openapi`
builds the schema from the same models: what a route takes and what its schema says are one
source. A model's field says its own refusal with :class:`Says` (``"content must be a
non-empty string"``, whatever is wrong with it); a field without one is refused by what is
wrong (``"files must be a bool"``, ``"title is required"``, ``"if_busy must be one of …"``);
a validator refuses with :func:`refuse`. Each model turns the first error of its fields into
its sentence, so an error deep in a list keeps the item's own words, and the model holding
the list names its place (``{where}``: ``"message 2"``, ``"input item 3"``).
"""

from __future__ import annotations

import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import (
    Annotated,
    Any,
    ClassVar,
    Literal,
    Self,
    TypeAlias,
    TypeVar,
    Union,
    get_args,
    get_origin,
)

from pydantic import (
    BaseModel,
    ConfigDict,
    GetCoreSchemaHandler,
    ModelWrapValidatorHandler,
    ValidationError,
    model_validator,
)
from pydantic_core import PydanticCustomError, core_schema

from drover.server.errors import ApiError

#: The type of a refusal (422 in a body, 400 in a query string).
REFUSED = "refused"
#: The type of a refusal of a text over what the server takes (413, before anything else).
TOO_LARGE = "body_too_large"
_OURS = frozenset({REFUSED, TOO_LARGE})

#: The Python names of JSON types, as a field of the wrong type is told (``"x must be a str"``).
_KIND = {
    "string_type": "str",
    "bool_type": "bool",
    "list_type": "list",
    "dict_type": "dict",
    "model_type": "dict",
    "model_attributes_type": "dict",
    "int_type": "int",
    "float_type": "float",
}
_NAMES = {str: "str", bool: "bool", int: "int", float: "float"}


_T = TypeVar("_T")


class _NotNull:
    """Of ``T | None``: the schema of ``T`` alone (null is refused as a ``T`` would be), so
    None is only the default of a field left out."""

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        (inner,) = (arg for arg in get_args(source) if arg is not type(None))
        return handler(inner)


#: A field a request may leave out (None), but not send as null: ``x: Omittable[str] = None``.
Omittable: TypeAlias = Annotated[_T | None, _NotNull()]


def refuse(message: str, *, too_large: bool = False) -> PydanticCustomError:
    """The error a validator raises to refuse a value with ``message`` (its ``{where}`` is
    filled in by the model holding the list it is in)."""
    return PydanticCustomError(TOO_LARGE if too_large else REFUSED, message)


@dataclass(frozen=True, slots=True)
class Says:
    """What a field is refused with, whatever is wrong with its value or when it is missing
    (``kind``, when given: what a value of another JSON type is told). A refusal of a
    validator deeper in the value keeps its own words."""

    text: str
    kind: str | None = None

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        kinds = {type(choice) for choice in _literal(source)}

        def validate(value: Any, inner: Callable[[Any], Any]) -> Any:
            try:
                return inner(value)
            except ValidationError as exc:
                errors = exc.errors()
                if errors[0]["type"] in _OURS:
                    raise
                wrong = all(_wrong_type(e, kinds) for e in errors)
                raise refuse(self.kind if self.kind and wrong else self.text) from None

        return core_schema.no_info_wrap_validator_function(validate, handler(source))


def _wrong_type(error: Any, kinds: set[type]) -> bool:
    """Whether ``error`` is of a value of another JSON type than its field's (or than one of
    the types of a union's members, whose name is the one place of its ``loc``)."""
    if len(error["loc"]) > 1:
        return False
    if error["type"] == "literal_error":
        return type(error["input"]) not in kinds
    return error["type"] in _KIND


class Wire(BaseModel):
    """A JSON object a route takes (:mod:`drover.server.wire`)."""

    # (defer_build: pydantic builds a model's validator when it is first used, not when the
    # server imports it — ~40 ms of CPU at `drover serve`'s start, bench/openapi.py.)
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, defer_build=True)

    #: How an unknown field is refused (``{field}``: its name, cut at 40 characters).
    unknown: ClassVar[str] = "unknown field: {field}"
    #: How the items of a list field are named in their refusals (``{n}``: from 1).
    positions: ClassVar[Mapping[str, str]] = {}

    @model_validator(mode="wrap")
    @classmethod
    def _one_sentence(cls, data: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        if isinstance(data, dict) and cls.model_config.get("extra") == "forbid":
            known = {f.alias or name for name, f in cls.model_fields.items()}
            unknown = sorted(str(key) for key in set(data) - known)
            if unknown:
                raise refuse(cls.unknown.replace("{field}", unknown[0][:40]))
        try:
            return handler(data)
        except ValidationError as exc:
            raise cls._sentence(exc.errors()[0]) from None

    @classmethod
    def _sentence(cls, error: Any) -> PydanticCustomError:
        kind, loc = error["type"], tuple(error["loc"])
        name = str(loc[0]) if loc else ""
        if kind in _OURS:
            message = str(error["msg"]).replace("{field}", name)
            place = next((p for p in loc[1:] if isinstance(p, int)), None)
            template = cls.positions.get(name)
            if template is not None and place is not None:
                message = message.replace("{where}", template.format(n=place + 1))
            return PydanticCustomError(kind, message)
        field = cls._field(name)
        says = next((m for m in field.metadata if isinstance(m, Says)), None) if field else None
        if says is not None:
            return refuse(says.text)
        if kind == "missing":
            return refuse(f"{name} is required")
        if kind in _KIND and len(loc) == 1:
            return refuse(f"{name} must be a {_KIND[kind]}")
        choices = _literal(field.annotation) if field else ()
        if kind == "literal_error" and choices:
            if not any(type(error["input"]) is type(c) for c in choices):
                return refuse(f"{name} must be a {_NAMES.get(type(choices[0]), 'value')}")
            return refuse(f"{name} must be one of {', '.join(map(str, choices))}")
        return refuse(f"{name}: {error['msg']}" if name else str(error["msg"]))

    @classmethod
    def _field(cls, name: str) -> Any:
        for key, field in cls.model_fields.items():
            if name in (key, field.alias):
                return field
        return None


class Answer(BaseModel):
    """A JSON object a route answers with: described, never validated (the routes build their
    answers; the fuzz test checks each one against the schema)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)


class OpenAnswer(BaseModel):
    """An answer that may carry more fields than it names."""

    model_config = ConfigDict(extra="allow", defer_build=True)


def _literal(annotation: Any) -> tuple[Any, ...]:
    """The values of the ``Literal`` in ``annotation`` (under ``Annotated`` and ``| None``)."""
    origin = get_origin(annotation)
    if origin is Literal:
        return get_args(annotation)
    if origin is Annotated:
        return _literal(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        return tuple(v for arg in get_args(annotation) for v in _literal(arg))
    return ()


def api_error(exc: ValidationError, *, status: int = 422) -> ApiError:
    """The answer to a request a model refused (``status``: of a refusal, as 422 for a body,
    400 for a query string)."""
    error = exc.errors()[0]
    message = str(error["msg"])
    if error["type"] == TOO_LARGE:
        return ApiError(413, "body_too_large", message)
    return ApiError(status, "invalid_request", message)
