"""Structured output as the OpenAI protocols ask for it natively, from a neutral
:class:`~drover.core.model_stream.OutputSpec` (Anthropic's is in :mod:`drover.providers.anthropic`:
this module loads only the ``openai`` SDK's types).

* Chat Completions: ``response_format`` ``{"type": "json_schema", "json_schema": {"name",
  "schema", "strict"}}``;
* Responses: ``text.format`` ``{"type": "json_schema", "name", "schema", "strict"}``.

OpenAI's strict mode (the model can only produce JSON of the schema) takes a subset of JSON
schema: every object lists all its properties as required and forbids others, and a ``$ref``
stands alone. :func:`openai_strict_schema` rewrites pydantic's schema that way, as the
``openai`` SDK's ``parse`` helpers do — an optional field stays optional in the model's answer
by being nullable, and pydantic fills in its default when validating. A schema that cannot be
strict (a ``dict`` field: an object with open ``additionalProperties``; a root that is not an
object) goes as it is with ``strict: false``: the API then only guides the model, and drover's
own validation and corrective retry do the rest.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from openai.types.responses import ResponseFormatTextJSONSchemaConfigParam
from openai.types.shared_params import ResponseFormatJSONSchema

from drover.core.model_stream import OutputSpec


class _NotStrict(Exception):
    """The schema has a part strict mode cannot express."""


def openai_strict_schema(schema: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """``schema`` for OpenAI's structured outputs, and whether it can be sent ``strict``."""
    root = copy.deepcopy(dict(schema))
    try:
        # (a recursive model's root is a $ref beside its $defs: inlined here)
        strict = _strict(root, root)
    except _NotStrict:
        return dict(schema), False
    if strict.get("type") != "object":
        return dict(schema), False
    return strict, True


def _strict(node: dict[str, Any], root: Mapping[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if isinstance(ref, str) and len(node) > 1:
        # A $ref with siblings (pydantic's field description) is inlined: strict mode
        # takes a $ref only on its own.
        del node["$ref"]
        return _strict({**_resolve(root, ref), **node}, root)
    for key in ("$defs", "definitions"):
        defs = node.get(key)
        if isinstance(defs, dict):
            node[key] = {name: _strict(dict(sub), root) for name, sub in defs.items()}
    properties = node.get("properties")
    if node.get("type") == "object" or isinstance(properties, dict):
        extra = node.get("additionalProperties", False)
        if extra is not False or "patternProperties" in node:
            raise _NotStrict()
        node["additionalProperties"] = False
        props = properties if isinstance(properties, dict) else {}
        node["properties"] = {name: _strict(dict(sub), root) for name, sub in props.items()}
        node["required"] = list(props)
    items = node.get("items")
    if isinstance(items, dict):
        node["items"] = _strict(dict(items), root)
    for key in ("anyOf", "allOf", "oneOf"):
        variants = node.get(key)
        if isinstance(variants, list):
            node[key] = [_strict(dict(v), root) for v in variants if isinstance(v, dict)]
    if "default" in node and node["default"] is None:
        del node["default"]  # the field is nullable already; null is its default
    return node


def _resolve(root: Mapping[str, Any], ref: str) -> dict[str, Any]:
    if not ref.startswith("#/"):
        raise _NotStrict()
    node: Any = root
    for part in ref[2:].split("/"):
        if not isinstance(node, Mapping) or part not in node:
            raise _NotStrict()
        node = node[part]
    if not isinstance(node, Mapping):
        raise _NotStrict()
    return copy.deepcopy(dict(node))


def chat_response_format(spec: OutputSpec) -> ResponseFormatJSONSchema:
    """Chat Completions' ``response_format`` for ``spec``."""
    schema, strict = openai_strict_schema(spec.schema)
    return {
        "type": "json_schema",
        "json_schema": {"name": spec.name, "schema": schema, "strict": strict},
    }


def responses_text_format(spec: OutputSpec) -> ResponseFormatTextJSONSchemaConfigParam:
    """The Responses API's ``text.format`` for ``spec``."""
    schema, strict = openai_strict_schema(spec.schema)
    return {"type": "json_schema", "name": spec.name, "schema": schema, "strict": strict}
