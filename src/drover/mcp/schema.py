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
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_COMBINATORS = ("anyOf", "oneOf", "allOf")
#: Keywords whose value is one schema, a list of schemas, or schemas by name.
_ONE = ("items", "additionalProperties", "not", "if", "then", "else", "contains")
_MANY = ("anyOf", "oneOf", "allOf", "prefixItems")
_BY_NAME = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")


def adapt_schema(schema: object) -> dict[str, Any]:
    """A copy of ``schema`` every provider accepts (see the module docstring)."""
    root = dict(schema) if isinstance(schema, Mapping) else {}
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
