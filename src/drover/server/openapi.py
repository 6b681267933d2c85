"""The OpenAPI 3.1 schema of the HTTP API, served at ``/openapi.json``, built from the route
table (:mod:`.operations`) and the models it names: each model's JSON Schema from pydantic,
its ``$defs`` gathered as ``components/schemas``; a request body's model and a route's query
and header models are written out in the operation itself. The routes validate with the same
models (:mod:`.wire`); the test suite fuzzes the API from this schema with schemathesis and
checks every answer against it.
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Iterator
from typing import Any

from pydantic import TypeAdapter
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

from drover import __name__ as _package
from drover.server.answers import Error
from drover.server.operations import OPERATIONS, Op, Reply

_REF = "#/components/schemas/{model}"
_PATH_PARAM = re.compile(r"{([^}]+)}")

#: What every route may answer: no token, and the guard's refusals (drover.server.guard).
_GUARDED = {
    401: Reply("missing or unknown bearer token (only when the server has tokens)", Error),
    403: Reply(
        "sent from a web page of another origin (not the server's own, not a --cors-origin)",
        Error,
    ),
    421: Reply(
        "the Host header names neither loopback, the bound address nor --allowed-host", Error
    ),
}
#: What a route that takes a body may answer about it.
_BAD_BODY = {
    400: Reply("the body is not JSON", Error),
    413: Reply("the body is too large", Error),
    415: Reply("no Content-Type: application/json (required even for an empty body)", Error),
    422: Reply("the body does not match the schema", Error),
}
#: What a route that takes no body answers to one (no body at all is taken, as ``{}`` is).
_NO_BODY = {**_BAD_BODY, 415: Reply("a body without Content-Type: application/json", Error)}


class _Schemas(GenerateJsonSchema):
    """pydantic's JSON Schema without titles (the components are named by their keys), each
    object's ``required`` listed (empty too), and without ``"default": null`` where null is not
    a value the field takes (it is left out)."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def model_schema(self, schema: core_schema.ModelSchema) -> JsonSchemaValue:
        json_schema = super().model_schema(schema)
        json_schema.pop("title", None)
        if "properties" in json_schema:
            json_schema.setdefault("required", [])
        return json_schema

    def default_schema(self, schema: core_schema.WithDefaultSchema) -> JsonSchemaValue:
        json_schema = super().default_schema(schema)
        if json_schema.get("default", ...) is None and not _takes_null(json_schema):
            del json_schema["default"]
        return json_schema


def _takes_null(schema: JsonSchemaValue) -> bool:
    kind = schema.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    if "type" not in schema and not any(k in schema for k in ("$ref", "anyOf", "oneOf")):
        return True  # (any value)
    return any(_takes_null(s) for s in (*schema.get("anyOf", ()), *schema.get("oneOf", ())))


def schema() -> dict[str, Any]:
    """The document: a copy (the caller may change it) of the one built at the first call —
    the route table and its models do not change while a process runs."""
    return copy.deepcopy(_document())


@functools.cache
def _document() -> dict[str, Any]:
    kinds = dict(_types())
    keys = list(kinds)
    found, defs = TypeAdapter.json_schemas(
        [(key, "validation", TypeAdapter(kinds[key])) for key in keys],
        ref_template=_REF,
        schema_generator=_Schemas,
    )
    components: dict[str, Any] = defs.get("$defs", {})
    given = {key: found[(key, "validation")] for key in keys}
    written = set()  # the models written out in an operation: no component of their own

    def inline(key: str) -> dict[str, Any]:
        ref = given[key].get("$ref", "")
        name = ref.rsplit("/", 1)[-1]
        written.add(name)
        return dict(components.get(name, given[key]))

    paths: dict[str, Any] = {}
    for n, op in enumerate(OPERATIONS):
        paths.setdefault(op.path, {})[op.method.lower()] = _operation(n, op, given, inline)
    for name in written:
        if not _referenced(name, [paths, components]):
            components.pop(name, None)
    return {
        "openapi": "3.1.0",
        "info": {"title": f"{_package} server", "version": "1"},
        "paths": paths,
        "components": {
            "schemas": dict(sorted(components.items())),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}, {}],
    }


def _types() -> Iterator[tuple[str, Any]]:
    """Every type the document describes, keyed by where it is used."""
    for n, op in enumerate(OPERATIONS):
        for part in ("body", "query", "headers"):
            model = getattr(op, part)
            if model is not None:
                yield f"{n}:{part}", model
        for status, reply in _replies(op).items():
            if reply.model is not None:
                yield f"{n}:{status}", reply.model
            for name, extra in reply.extra.items():
                yield f"{n}:{status}:{name}", extra
            for media, other in reply.also.items():
                yield f"{n}:{status}:{media}", other


def _replies(op: Op) -> dict[int, Reply]:
    common = {} if op.body is None else _NO_BODY if op.optional_body else _BAD_BODY
    return dict(sorted({**common, **op.replies, **_GUARDED}.items()))


def _operation(n: int, op: Op, given: dict[str, Any], inline: Any) -> dict[str, Any]:
    params = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in _PATH_PARAM.findall(op.path)
    ]
    for part, where in (("query", "query"), ("headers", "header")):
        if getattr(op, part) is not None:
            params += _parameters(inline(f"{n}:{part}"), where)
    out: dict[str, Any] = {"summary": op.summary}
    if params:
        out["parameters"] = params
    if op.body is not None:
        # Required: the Content-Type is, even when the JSON object is empty.
        content = {"application/json": {"schema": inline(f"{n}:body")}}
        out["requestBody"] = {"required": not op.optional_body, "content": content}
    responses: dict[str, Any] = {}
    for status, reply in _replies(op).items():
        answer: dict[str, Any] = {"description": reply.description}
        if reply.model is not None:
            media: dict[str, Any] = {"schema": given[f"{n}:{status}"]}
            for name in reply.extra:
                media[name] = given[f"{n}:{status}:{name}"]
            answer["content"] = {reply.media: media}
            for other in reply.also:
                answer["content"][other] = {"schema": given[f"{n}:{status}:{other}"]}
        responses[str(status)] = answer
    out["responses"] = responses
    return out


def _parameters(model: dict[str, Any], where: str) -> list[dict[str, Any]]:
    required = set(model.get("required", ()))
    out = []
    for name, spec in model.get("properties", {}).items():
        spec = dict(spec)
        param: dict[str, Any] = {"name": name, "in": where}
        if name in required:
            param["required"] = True
        if "description" in spec:
            param["description"] = spec.pop("description")
        param["schema"] = spec
        out.append(param)
    return out


def _referenced(name: str, where: Any) -> bool:
    ref = _REF.format(model=name)
    if isinstance(where, dict):
        return where.get("$ref") == ref or any(_referenced(name, v) for v in where.values())
    if isinstance(where, list):
        return any(_referenced(name, v) for v in where)
    return False
