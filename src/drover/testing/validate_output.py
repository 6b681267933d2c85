"""The structured-output request fields, checked as each real API checks them (a 400 otherwise).

* Chat Completions ``response_format``: ``{"type": "text"}``, ``{"type": "json_object"}`` or
  ``{"type": "json_schema", "json_schema": {"name", "schema"?, "strict"?, "description"?}}``.
* Responses ``text.format``: the same types, a ``json_schema`` format's fields side by side
  with its ``type``: ``name`` and ``schema`` required, ``strict`` and ``description``.
* With ``strict: true`` OpenAI takes a schema only when its root is an object, every object
  sets ``additionalProperties`` to false and lists every property in ``required``, and no
  ``$ref`` has sibling keywords.
* Anthropic ``output_config``: ``effort`` and ``format``, a format being ``{"type":
  "json_schema", "schema"}``; every object of the schema sets ``additionalProperties`` to false,
  and only the keywords the API supports appear (those the ``anthropic`` SDK's
  ``transform_schema`` keeps: no numeric or string-length bounds, no defaults).

Names in messages follow the APIs' own parameter paths.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

_NAME = re.compile(r"^[a-zA-Z0-9_-]+$")
_OPENAI_TYPES = ("text", "json_object", "json_schema")
_CHAT_SCHEMA_KEYS = frozenset({"name", "schema", "strict", "description"})
_RESPONSES_SCHEMA_KEYS = frozenset({"type", "name", "schema", "strict", "description"})
#: Keywords an Anthropic output schema may hold (what ``anthropic.transform_schema`` keeps).
_ANTHROPIC_KEYWORDS = frozenset(
    {
        "$defs",
        "$ref",
        "type",
        "anyOf",
        "allOf",
        "enum",
        "const",
        "description",
        "title",
        "properties",
        "additionalProperties",
        "required",
        "format",
        "items",
        "minItems",
    }
)
_ANTHROPIC_FORMATS = frozenset(
    {"date-time", "time", "date", "duration", "email", "hostname", "uri", "ipv4", "ipv6", "uuid"}
)


def _subschemas(
    node: Mapping[str, Any], path: tuple[str, ...]
) -> Iterator[tuple[Any, tuple[str, ...]]]:
    """The schemas directly inside ``node``, with their context paths."""
    for key in ("properties", "$defs", "definitions"):
        named = node.get(key)
        if isinstance(named, Mapping):
            for name, sub in named.items():
                yield sub, (*path, key, str(name))
    items = node.get("items")
    if isinstance(items, Mapping):
        yield items, (*path, "items")
    for key in ("anyOf", "allOf", "oneOf"):
        variants = node.get(key)
        if isinstance(variants, list):
            for i, sub in enumerate(variants):
                yield sub, (*path, key, str(i))


def _walk(
    node: Any, path: tuple[str, ...] = ()
) -> Iterator[tuple[Mapping[str, Any], tuple[str, ...]]]:
    """Every schema object of a schema, depth first, with its context path."""
    if not isinstance(node, Mapping):
        return
    yield node, path
    for sub, where in _subschemas(node, path):
        yield from _walk(sub, where)


def _is_object(node: Mapping[str, Any]) -> bool:
    return node.get("type") == "object" or isinstance(node.get("properties"), Mapping)


# -- OpenAI ------------------------------------------------------------------------------------


def _strict_problems(name: str, schema: Mapping[str, Any]) -> list[str]:
    head = f"Invalid schema for response_format '{name}'"
    if schema.get("type") != "object":
        got = schema.get("type", "")
        return [
            f"{head}: schema must be a JSON Schema of 'type: \"object\"', got 'type: \"{got}\"'."
        ]
    problems: list[str] = []
    for node, path in _walk(schema):
        context = f"In context={path!r}" if path else "In context=()"
        ref_siblings = sorted(set(node) - {"$ref"}) if "$ref" in node else []
        if ref_siblings:
            problems.append(f"{head}: {context}, $ref cannot have keywords {set(ref_siblings)}.")
        if not _is_object(node):
            continue
        if node.get("additionalProperties") is not False:
            problems.append(
                f"{head}: {context}, 'additionalProperties' is required to be supplied and to "
                "be false."
            )
        properties = node.get("properties")
        keys = list(properties) if isinstance(properties, Mapping) else []
        required = node.get("required")
        listed = required if isinstance(required, list) else []
        missing = [k for k in keys if k not in listed]
        if missing or not isinstance(required, list):
            problems.append(
                f"{head}: {context}, 'required' is required to be supplied and to be an array "
                f"including every key in properties. Missing '{(missing or keys or [''])[0]}'."
            )
    return problems


def _json_schema_problems(
    where: str, fields: Mapping[str, Any], allowed: frozenset[str], schema_required: bool
) -> list[str]:
    problems = [f"Unknown parameter: '{where}.{key}'." for key in fields if key not in allowed]
    name = fields.get("name")
    if not isinstance(name, str):
        problems.append(f"Missing required parameter: '{where}.name'.")
    elif len(name) > 64:
        problems.append(
            f"Invalid '{where}.name': string too long. Expected a string with maximum length "
            f"64, but got a string with length {len(name)} instead."
        )
    elif not _NAME.match(name):
        problems.append(
            f"Invalid '{where}.name': string does not match pattern. Expected a string that "
            "matches the pattern '^[a-zA-Z0-9_-]+$'."
        )
    schema = fields.get("schema")
    if schema is None and schema_required:
        problems.append(f"Missing required parameter: '{where}.schema'.")
    elif schema is not None and not isinstance(schema, Mapping):
        problems.append(f"Invalid type for '{where}.schema': expected an object.")
    strict = fields.get("strict")
    if strict is not None and not isinstance(strict, bool):
        problems.append(f"Invalid type for '{where}.strict': expected a boolean.")
    if problems or strict is not True or not isinstance(schema, Mapping):
        return problems
    return _strict_problems(str(name), schema)


def _openai_type(where: str, value: Mapping[str, Any]) -> list[str]:
    kind = value.get("type")
    if kind is None:
        return [f"Missing required parameter: '{where}.type'."]
    if kind not in _OPENAI_TYPES:
        return [
            f"Invalid value: '{kind}'. Supported values are: 'text', 'json_object', and "
            "'json_schema'."
        ]
    return []


def response_format_problems(body: Mapping[str, Any]) -> list[str]:
    """Chat Completions' ``response_format``."""
    if "response_format" not in body:
        return []
    value = body["response_format"]
    if not isinstance(value, Mapping):
        return ["Invalid type for 'response_format': expected an object."]
    problems = _openai_type("response_format", value)
    if problems:
        return problems
    if value["type"] != "json_schema":
        extra = [k for k in value if k != "type"]
        return [f"Unknown parameter: 'response_format.{k}'." for k in extra]
    problems = [
        f"Unknown parameter: 'response_format.{k}'."
        for k in value
        if k not in ("type", "json_schema")
    ]
    fields = value.get("json_schema")
    if not isinstance(fields, Mapping):
        return [*problems, "Missing required parameter: 'response_format.json_schema'."]
    where = "response_format.json_schema"
    return problems + _json_schema_problems(where, fields, _CHAT_SCHEMA_KEYS, False)


def text_format_problems(body: Mapping[str, Any]) -> list[str]:
    """The Responses API's ``text.format``."""
    text = body.get("text")
    if text is None:
        return []
    if not isinstance(text, Mapping):
        return ["Invalid type for 'text': expected an object."]
    problems = [f"Unknown parameter: 'text.{k}'." for k in text if k not in ("format", "verbosity")]
    value = text.get("format")
    if value is None:
        return problems
    if not isinstance(value, Mapping):
        return [*problems, "Invalid type for 'text.format': expected an object."]
    problems += _openai_type("text.format", value)
    if problems or value["type"] != "json_schema":
        return problems
    return _json_schema_problems("text.format", value, _RESPONSES_SCHEMA_KEYS, True)


# -- Anthropic ---------------------------------------------------------------------------------


def output_config_problems(body: Mapping[str, Any]) -> list[str]:
    """Anthropic's ``output_config``."""
    if "output_config" not in body:
        return []
    config = body["output_config"]
    if not isinstance(config, Mapping):
        return ["output_config: Input should be a valid dictionary"]
    problems = [
        f"output_config.{k}: Extra inputs are not permitted"
        for k in config
        if k not in ("effort", "format")
    ]
    fmt = config.get("format")
    if fmt is None:
        return problems
    if not isinstance(fmt, Mapping):
        return [*problems, "output_config.format: Input should be a valid dictionary"]
    where = "output_config.format"
    problems += [
        f"{where}.{k}: Extra inputs are not permitted" for k in fmt if k not in ("type", "schema")
    ]
    if fmt.get("type") != "json_schema":
        problems.append(f"{where}.type: Input should be 'json_schema'")
    schema = fmt.get("schema")
    if not isinstance(schema, Mapping):
        problems.append(f"{where}.schema: Field required")
        return problems
    for node, path in _walk(schema):
        at = ".".join((f"{where}.schema", *path))
        problems += [
            f"{at}: the keyword '{key}' is not supported in output schemas"
            for key in node
            if key not in _ANTHROPIC_KEYWORDS
        ]
        if node.get("format") is not None and node.get("format") not in _ANTHROPIC_FORMATS:
            problems.append(f"{at}: the string format '{node['format']}' is not supported")
        if node.get("minItems") not in (None, 0, 1):
            problems.append(f"{at}: 'minItems' values other than 0 and 1 are not supported")
        if _is_object(node) and node.get("additionalProperties") is not False:
            problems.append(
                f"{at}: For 'object' type, 'additionalProperties' must be explicitly set to false"
            )
    return problems
