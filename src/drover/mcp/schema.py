"""Tool input schemas from MCP servers, made acceptable to every provider drover speaks to.

A schema goes to the model as the server wrote it except for the few features one of the three
APIs refuses with a 400 — and a refused tool fails every request of the session, since the whole
tool list goes with each one (the rules are in :mod:`drover.testing.validate`):

* the root must be ``"type": "object"`` with ``properties`` (OpenAI); a root ``anyOf``,
  ``oneOf`` or ``allOf`` (refused by Anthropic and OpenAI) becomes one object with the
  properties of its branches, requiring what every branch requires (``allOf``: what any branch
  requires); a root ``enum`` or ``not`` is dropped (OpenAI);
* an ``array`` schema without ``items`` gets ``"items": {}`` and an ``object`` schema without
  ``properties`` gets ``"properties": {}`` (OpenAI); neither constrains anything;
* an entry of ``properties`` that is not a schema (an object or a boolean) is dropped (OpenAI).

Only positions that hold schemas are visited: a ``default``, an ``enum`` value or an example
that happens to look like a schema is left alone. What is dropped only constrained the
arguments; the server still validates what it gets.

A schema that is malformed where a schema or a list of them belongs — an ``anyOf`` that is not
a list, a branch that is a number, ``properties`` that are a list, ``required`` that is not a
list of names, a ``type`` that is not a name, nesting deeper than :data:`MAX_DEPTH` — cannot be
adapted into one the APIs take: :func:`adapt_schema` raises :class:`SchemaError` saying where,
and the tool is left out (:mod:`drover.mcp.servers`). Only an entry of ``properties`` that is
not a schema is dropped instead (a misplaced keyword, common in the wild).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

_COMBINATORS = ("anyOf", "oneOf", "allOf")
#: Keywords whose value is one schema, a list of schemas, or schemas by name.
_ONE = ("items", "additionalProperties", "not", "if", "then", "else", "contains")
_MANY = ("anyOf", "oneOf", "allOf", "prefixItems")
_BY_NAME = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
#: Levels of nested schemas taken; deeper is refused (no tool needs it; recursion has a limit).
MAX_DEPTH = 64


class SchemaError(ValueError):
    """A tool's input schema is malformed where a schema belongs (see the module docstring)."""


def adapt_schema(schema: object) -> dict[str, Any]:
    """A copy of ``schema`` every provider accepts (see the module docstring); raises
    :class:`SchemaError` when a part of it is malformed."""
    root = dict(schema) if isinstance(schema, Mapping) else {}
    _check(root, "", 0)
    for keyword in _COMBINATORS:
        branches = root.pop(keyword, None)
        if isinstance(branches, list):
            _merge_branches(root, [b for b in branches if isinstance(b, Mapping)], keyword)
    root.pop("enum", None)
    root.pop("not", None)
    root["type"] = "object"
    return _visit(root)


def _merge_branches(root: dict[str, Any], branches: list[Mapping[str, Any]], keyword: str) -> None:
    properties = dict(root.get("properties") or {})
    required = [r for r in root.get("required") or () if isinstance(r, str)]
    per_branch: list[set[str]] = []
    for branch in branches:
        for name, schema in (branch.get("properties") or {}).items():
            properties.setdefault(name, schema)
        per_branch.append({r for r in branch.get("required") or () if isinstance(r, str)})
    if per_branch:
        merged = set.union(*per_branch) if keyword == "allOf" else set.intersection(*per_branch)
        required += sorted(merged - set(required))
    root["properties"] = properties
    if required:
        root["required"] = required


def _is(node: Mapping[str, Any], kind: str) -> bool:
    declared = node.get("type")
    return declared == kind or (isinstance(declared, list) and kind in declared)


def _visit(node: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(node)
    for keyword in _ONE:
        value = out.get(keyword)
        if isinstance(value, Mapping):
            out[keyword] = _visit(value)
        elif keyword == "items" and isinstance(value, list):  # (the older tuple form)
            out[keyword] = [_visit(v) if isinstance(v, Mapping) else v for v in value]
    for keyword in _MANY:
        value = out.get(keyword)
        if isinstance(value, list):
            out[keyword] = [_visit(v) if isinstance(v, Mapping) else v for v in value]
    for keyword in _BY_NAME:
        value = out.get(keyword)
        if isinstance(value, Mapping):
            out[keyword] = {
                name: _visit(schema) if isinstance(schema, Mapping) else schema
                for name, schema in value.items()
                if isinstance(schema, Mapping | bool) or keyword != "properties"
            }
    if _is(out, "array") and "items" not in out and "prefixItems" not in out:
        out["items"] = {}
    if _is(out, "object") and not isinstance(out.get("properties"), Mapping):
        out["properties"] = {}
    return out


# -- checking ----------------------------------------------------------------------------------


def _check(node: Mapping[str, Any], where: str, depth: int) -> None:
    """Raise :class:`SchemaError` for the first malformed part of the schema ``node``."""
    if depth > MAX_DEPTH:
        raise SchemaError(f"the input schema is nested deeper than {MAX_DEPTH} levels")
    for keyword in _ONE:
        if keyword in node:
            value = node[keyword]
            if keyword == "items" and isinstance(value, list):  # (the older tuple form)
                _check_each(value, f"{where}.items", depth)
            else:
                _check_one(value, f"{where}.{keyword}", depth)
    for keyword in _MANY:
        if keyword in node:
            value = node[keyword]
            if not isinstance(value, list):
                raise SchemaError(f"{_at(where, keyword)} is {_kind(value)}, not a list of schemas")
            _check_each(value, f"{where}.{keyword}", depth)
    for keyword in _BY_NAME:
        if keyword not in node:
            continue
        value = node[keyword]
        if not isinstance(value, Mapping):
            raise SchemaError(f"{_at(where, keyword)} is {_kind(value)}, not an object of schemas")
        for name, child in value.items():
            # A ``properties`` entry that is not a schema is dropped, not refused (see above).
            if keyword != "properties" or isinstance(child, Mapping):
                _check_one(child, f"{where}.{keyword}[{json.dumps(str(name))}]", depth)
    required = node.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        raise SchemaError(f"{_at(where, 'required')} is not a list of property names")
    kind = node.get("type", "object")
    if not isinstance(kind, str) and not (
        isinstance(kind, list) and all(isinstance(k, str) for k in kind)
    ):
        raise SchemaError(f"{_at(where, 'type')} is {_kind(kind)}, not a type name or a list")


def _check_one(value: object, where: str, depth: int) -> None:
    if isinstance(value, Mapping):
        _check(value, where, depth + 1)
    elif not isinstance(value, bool):
        raise SchemaError(f"{where.lstrip('.')} is {_kind(value)}, not a schema")


def _check_each(values: list[Any], where: str, depth: int) -> None:
    for i, value in enumerate(values):
        _check_one(value, f"{where}[{i}]", depth)


def _at(where: str, keyword: str) -> str:
    return f"{where}.{keyword}".lstrip(".")


def _kind(value: object) -> str:
    """What a JSON value is, in words ("a list", "the number 5")."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {json.dumps(value)}"
    if isinstance(value, int | float):
        return f"the number {value!r}"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object"
