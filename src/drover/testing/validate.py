"""The history checker: the request rules each real API enforces with a 400.

Every request the fake server receives goes through the validator of its protocol; a non-empty
result is answered with that API's ``invalid_request_error`` (first problem as the message) and
kept in the server's ``violations``, which fails the test. The messages follow the real APIs'
wording where it is known, prefixed with where in the body the problem is.

* Anthropic: messages present, roles ``user``/``assistant`` with a user first, non-empty content
  and text, each assistant ``tool_use`` answered by a ``tool_result`` with its id at the start of
  the very next user message, no ``tool_result`` without a ``tool_use`` in the message before,
  unique ``tool_use`` ids, object inputs, signed thinking blocks, ``image`` blocks with a
  ``base64`` (or ``url``) source.
* Chat Completions: an assistant message with ``tool_calls`` is followed by one ``tool`` message
  per call before anything else, no ``tool`` message without a call, unique ids, string
  arguments; content parts ``text`` and ``image_url`` (only in a user message).
* Responses: over the resolved input (the ``previous_response_id`` chain plus this request's
  input), every ``function_call`` has its ``function_call_output`` and vice versa, and no
  ``call_id`` repeats; a user message's parts are ``input_text`` and ``input_image`` (with its
  required ``detail``).

An inline image (Anthropic's base64 source, an OpenAI ``data:`` URL) must be valid base64 of an
image of the type it claims (PNG, JPEG, GIF or WebP, told by its first bytes), as the APIs
check.

Each also checks the request's structured-output field (Anthropic ``output_config``, Chat
``response_format``, Responses ``text.format``): :mod:`drover.testing.validate_output`.

The tools offered are checked too, as each API refuses them (a refused tool fails every request
that carries it):

* Anthropic: a name of 1 to 128 of ``[a-zA-Z0-9_-]``, an ``input_schema`` of ``"type":
  "object"``, no ``oneOf``/``allOf``/``anyOf`` at its top level.
* Both OpenAI APIs: a name of ``[a-zA-Z0-9_-]`` of at most 64 characters; ``parameters`` of
  ``"type": "object"`` with ``properties`` and no ``oneOf``/``anyOf``/``allOf``/``enum``/``not``
  at the top level, every ``array`` schema with ``items``, every ``properties`` entry a schema.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping, Sequence
from typing import Any

from drover.testing.validate_output import (
    output_config_problems,
    response_format_problems,
    text_format_problems,
)


def _blocks(content: object) -> list[Any]:
    """Message content as a block list (a plain string is one text block)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content) if isinstance(content, list) else []


def _block_type(block: object) -> str:
    return str(block.get("type", "")) if isinstance(block, Mapping) else ""


def _tool_use_ids(message: Mapping[str, Any]) -> list[str]:
    return [
        str(block.get("id"))
        for block in _blocks(message.get("content"))
        if _block_type(block) == "tool_use"
    ]


def validate_anthropic(body: Mapping[str, Any]) -> list[str]:
    return _anthropic_history(body) + output_config_problems(body)


def _anthropic_history(body: Mapping[str, Any]) -> list[str]:
    messages = body.get("messages")
    if not isinstance(messages, list):
        return ["messages: Field required"]
    if not messages:
        return ["messages: at least one message is required"]
    problems: list[str] = []
    seen_ids: set[str] = set()
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            problems.append(f"messages.{i}: Input should be a valid dictionary")
            continue
        role = message.get("role")
        if role not in ("user", "assistant"):
            problems.append(f"messages.{i}.role: Input should be 'user' or 'assistant'")
        if i == 0 and role != "user":
            problems.append('messages: first message must use the "user" role')
        content = message.get("content")
        if not isinstance(content, str | list):
            problems.append(f"messages.{i}.content: Input should be a valid string or list")
            continue
        is_final_assistant = role == "assistant" and i == len(messages) - 1
        if not content and not is_final_assistant:
            problems.append(
                f"messages.{i}: all messages must have non-empty content except for the "
                "optional final assistant message"
            )
        problems += _check_blocks(i, content, seen_ids)
        if role == "assistant":
            problems += _check_answered(i, message, messages)
        if role == "user":
            problems += _check_results_expected(i, message, messages)
    return problems + _anthropic_tools(body.get("tools"))


_ANTHROPIC_NAME = re.compile(r"[a-zA-Z0-9_-]{1,128}")
_OPENAI_NAME = re.compile(r"[a-zA-Z0-9_-]+")
_ROOT_COMBINATORS = ("oneOf", "allOf", "anyOf")


def _anthropic_tools(tools: object) -> list[str]:
    problems: list[str] = []
    for i, tool in enumerate(tools if isinstance(tools, list) else ()):
        if not isinstance(tool, Mapping) or tool.get("type", "custom") != "custom":
            continue  # (server tools are not drover's)
        where = f"tools.{i}.custom"
        name = tool.get("name")
        if not isinstance(name, str) or not _ANTHROPIC_NAME.fullmatch(name):
            problems.append(f"{where}.name: String should match pattern '^[a-zA-Z0-9_-]{{1,128}}$'")
        schema = tool.get("input_schema")
        if not isinstance(schema, Mapping):
            problems.append(f"{where}.input_schema: Field required")
            continue
        if schema.get("type") != "object":
            problems.append(f"{where}.input_schema.type: Input should be 'object'")
        if any(k in schema for k in _ROOT_COMBINATORS):
            problems.append(
                f"{where}.input_schema: input_schema does not support oneOf, allOf, or anyOf at "
                "the top level"
            )
    return problems


def _openai_tools(tools: object, *, flat: bool) -> list[str]:
    """Chat Completions nests a function under ``function``; Responses (``flat``) does not."""
    problems: list[str] = []
    for i, tool in enumerate(tools if isinstance(tools, list) else ()):
        if not isinstance(tool, Mapping) or tool.get("type") != "function":
            continue
        function = tool if flat else tool.get("function")
        where = f"tools[{i}]" if flat else f"tools[{i}].function"
        if not isinstance(function, Mapping):
            problems.append(f"Missing required parameter: '{where}'.")
            continue
        name = function.get("name")
        if not isinstance(name, str) or not _OPENAI_NAME.fullmatch(name):
            problems.append(
                f"Invalid '{where}.name': string does not match pattern. Expected a string that "
                "matches the pattern '^[a-zA-Z0-9_-]+$'."
            )
        elif len(name) > 64:
            problems.append(
                f"Invalid '{where}.name': string too long. Expected a string with maximum length "
                f"64, but got a string with length {len(name)} instead."
            )
        if "parameters" in function:
            problems += _openai_parameters(str(name), function["parameters"])
    return problems


def _openai_parameters(name: str, schema: object) -> list[str]:
    prefix = f"Invalid schema for function '{name}':"
    kind = schema.get("type") if isinstance(schema, Mapping) else None
    if not isinstance(schema, Mapping) or kind != "object":
        return [
            f"{prefix} schema must be a JSON Schema of 'type: \"object\"', got 'type: \"{kind}\"'."
        ]
    if any(k in schema for k in (*_ROOT_COMBINATORS, "enum", "not")):
        return [
            f"{prefix} schema must have type 'object' and not have 'oneOf'/'anyOf'/'allOf'/'enum'/"
            "'not' at the top level."
        ]
    problems = []
    if "properties" not in schema:
        problems.append(f"{prefix} In context=(), object schema missing properties.")
    return problems + [f"{prefix} {p}" for p in _schema_problems(schema, ())]


def _schema_problems(schema: Mapping[str, Any], context: tuple[str, ...]) -> list[str]:
    """OpenAI's rules below the root: arrays need ``items``, properties must be schemas."""
    problems: list[str] = []
    declared = schema.get("type")
    is_array = declared == "array" or (isinstance(declared, list) and "array" in declared)
    if is_array and "items" not in schema and "prefixItems" not in schema:
        problems.append(f"In context={context!r}, array schema missing items.")
    children: list[tuple[tuple[str, ...], object]] = []
    properties = schema.get("properties")
    if isinstance(properties, Mapping):
        for key, value in properties.items():
            if not isinstance(value, Mapping | bool):
                problems.append(
                    f"In context={(*context, 'properties')!r}, {value!r} is not of type "
                    "'object', 'boolean'."
                )
            children.append(((*context, "properties", str(key)), value))
    for keyword in ("items", "additionalProperties", "not"):
        children.append(((*context, keyword), schema.get(keyword)))
    for keyword in ("anyOf", "oneOf", "allOf", "prefixItems"):
        branches = schema.get(keyword)
        for j, branch in enumerate(branches if isinstance(branches, list) else ()):
            children.append(((*context, keyword, str(j)), branch))
    for keyword in ("$defs", "definitions"):
        named = schema.get(keyword)
        for key, value in named.items() if isinstance(named, Mapping) else ():
            children.append(((*context, keyword, str(key)), value))
    for where, child in children:
        if isinstance(child, Mapping):
            problems += _schema_problems(child, where)
    return problems


def _check_blocks(i: int, content: str | list[Any], seen_ids: set[str]) -> list[str]:
    problems: list[str] = []
    if isinstance(content, str):
        return problems
    for j, block in enumerate(content):
        where = f"messages.{i}.content.{j}"
        kind = _block_type(block)
        if kind == "text":
            text = block.get("text")
            if not isinstance(text, str) or not text:
                problems.append(f"{where}.text: text content blocks must be non-empty")
            elif not text.strip():
                problems.append(
                    f"{where}.text: text content blocks must contain non-whitespace text"
                )
        elif kind == "tool_use":
            tool_id = str(block.get("id"))
            if tool_id in seen_ids:
                problems.append(f"{where}: `tool_use` ids must be unique: {tool_id}")
            seen_ids.add(tool_id)
            if not isinstance(block.get("input"), Mapping):
                problems.append(f"{where}.tool_use.input: Input should be a valid dictionary")
        elif kind == "image":
            problems += _anthropic_image(where, block)
        elif kind == "thinking":
            signature = block.get("signature")
            if not isinstance(signature, str):
                problems.append(f"{where}.thinking.signature: Field required")
            elif not signature:
                problems.append(f"{where}: Invalid `signature` in `thinking` block")
    return problems


#: The image types the three APIs take, by the bytes a file of each starts with.
IMAGE_MAGIC = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/gif": (b"GIF87a", b"GIF89a"),
    "image/webp": (b"RIFF",),
}
_DATA_URL = re.compile(r"data:(image/[a-z]+);base64,(.*)", re.DOTALL)


def _image_data_problems(where: str, media_type: object, data: object) -> list[str]:
    """An inline image's data: valid base64 whose bytes are of the type it says."""
    if media_type not in IMAGE_MAGIC:
        return [
            f"{where}.media_type: Input should be 'image/jpeg', 'image/png', 'image/gif' or "
            "'image/webp'"
        ]
    if not isinstance(data, str) or not data:
        return [f"{where}.data: Field required"]
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return [f"{where}.data: invalid base64 data"]
    if not raw.startswith(IMAGE_MAGIC[str(media_type)]) or (
        media_type == "image/webp" and raw[8:12] != b"WEBP"
    ):
        return [f"{where}: Image does not match the provided media type {media_type}"]
    return []


def _anthropic_image(where: str, block: Mapping[str, Any]) -> list[str]:
    source = block.get("source")
    if not isinstance(source, Mapping):
        return [f"{where}.image.source: Field required"]
    kind = source.get("type")
    if kind == "base64":
        return _image_data_problems(
            f"{where}.image.source.base64", source.get("media_type"), source.get("data")
        )
    if kind == "url":
        url = source.get("url")
        return (
            []
            if isinstance(url, str) and url
            else [f"{where}.image.source.url.url: Field required"]
        )
    return [
        f"{where}.image.source: Input tag '{kind}' found using 'type' does not match any of the "
        "expected tags: 'base64', 'url', 'file'"
    ]


def _openai_image_url(where: str, url: object) -> list[str]:
    """An OpenAI image URL: http(s), or a ``data:`` URL of an image's base64."""
    if not isinstance(url, str) or not url:
        return [f"Missing required parameter: '{where}'."]
    if url.startswith(("http://", "https://")):
        return []
    found = _DATA_URL.fullmatch(url)
    if found is None:
        return [f"Invalid '{where}': Expected a base64-encoded data URL with an image MIME type."]
    return [
        f"Invalid '{where}': {p.split(': ', 1)[-1]}"
        for p in _image_data_problems(where, found.group(1), found.group(2))
    ]


def _chat_content_problems(i: int, message: Mapping[str, Any]) -> list[str]:
    """Content parts: ``text`` anywhere parts are taken, ``image_url`` only from the user."""
    content = message.get("content")
    if not isinstance(content, list):
        return []
    problems: list[str] = []
    for j, part in enumerate(content):
        where = f"messages[{i}].content[{j}]"
        kind = _block_type(part)
        if kind == "text":
            if not isinstance(part.get("text"), str):
                problems.append(f"Missing required parameter: '{where}.text'.")
        elif kind == "image_url":
            if message.get("role") != "user":
                problems.append(
                    f"Invalid 'messages[{i}]': Image URLs are only allowed for messages with "
                    f"role 'user', but this message with role '{message.get('role')}' contains "
                    "an image URL."
                )
                continue
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, Mapping) else None
            problems += _openai_image_url(f"{where}.image_url.url", url)
            detail = image.get("detail") if isinstance(image, Mapping) else None
            if detail is not None and detail not in _DETAILS:
                problems.append(f"Invalid value: '{detail}'. Supported values are: {_DETAILS}.")
        else:
            problems.append(f"Invalid value: '{kind}'. Supported values are: 'text', 'image_url'.")
    return problems


_DETAILS = ("auto", "low", "high", "original")


def _responses_content_problems(i: int, item: Mapping[str, Any]) -> list[str]:
    """A message item's content parts: ``input_text`` and ``input_image`` from the user."""
    content = item.get("content")
    if item.get("role") != "user" or not isinstance(content, list):
        return []
    problems: list[str] = []
    for j, part in enumerate(content):
        where = f"input[{i}].content[{j}]"
        kind = _block_type(part)
        if kind == "input_text":
            if not isinstance(part.get("text"), str):
                problems.append(f"Missing required parameter: '{where}.text'.")
        elif kind == "input_image":
            if "detail" not in part:
                problems.append(f"Missing required parameter: '{where}.detail'.")
            elif part["detail"] not in _DETAILS:
                problems.append(
                    f"Invalid value: '{part['detail']}'. Supported values are: {_DETAILS}."
                )
            if part.get("file_id") is None:
                problems += _openai_image_url(f"{where}.image_url", part.get("image_url"))
        else:
            problems.append(
                f"Invalid value: '{kind}'. Supported values are: 'input_text', 'input_image', "
                "'input_file'."
            )
    return problems


def _leading_results(message: object) -> list[str]:
    """The ``tool_use_id`` of each ``tool_result`` before the first other block."""
    if not isinstance(message, Mapping) or message.get("role") != "user":
        return []
    ids: list[str] = []
    for block in _blocks(message.get("content")):
        if _block_type(block) != "tool_result":
            break
        ids.append(str(block.get("tool_use_id")))
    return ids


def _check_answered(i: int, message: Mapping[str, Any], messages: Sequence[Any]) -> list[str]:
    ids = _tool_use_ids(message)
    if not ids:
        return []
    following = messages[i + 1] if i + 1 < len(messages) else None
    answered = set(_leading_results(following))
    missing = [tool_id for tool_id in ids if tool_id not in answered]
    if not missing:
        return []
    return [
        f"messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately "
        f"after: {', '.join(missing)}. Each `tool_use` block must have a corresponding "
        "`tool_result` block in the next message."
    ]


def _check_results_expected(
    i: int, message: Mapping[str, Any], messages: Sequence[Any]
) -> list[str]:
    previous = messages[i - 1] if i > 0 else None
    expected = set(_tool_use_ids(previous)) if isinstance(previous, Mapping) else set()
    if isinstance(previous, Mapping) and previous.get("role") != "assistant":
        expected = set()
    problems = []
    for j, block in enumerate(_blocks(message.get("content"))):
        if _block_type(block) != "tool_result":
            continue
        tool_use_id = str(block.get("tool_use_id"))
        if tool_use_id not in expected:
            problems.append(
                f"messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` "
                f"blocks: {tool_use_id}. Each `tool_result` block must have a corresponding "
                "`tool_use` block in the previous message."
            )
    return problems


def validate_chat(body: Mapping[str, Any]) -> list[str]:
    return _chat_history(body) + response_format_problems(body)


def _chat_history(body: Mapping[str, Any]) -> list[str]:
    messages = body.get("messages")
    if not isinstance(messages, list):
        return ["Missing required parameter: 'messages'."]
    if not messages:
        return ["[] is too short - 'messages'"]
    problems: list[str] = []
    seen_ids: set[str] = set()
    pending: dict[str, int] = {}  # call id -> index of the assistant message, while answerable
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            problems.append(f"Invalid type for 'messages[{i}]': expected an object.")
            continue
        role = message.get("role")
        if role == "tool":
            call_id = str(message.get("tool_call_id"))
            if call_id not in pending:
                problems.append(
                    f"messages[{i}]: Invalid parameter: messages with role 'tool' must be a "
                    "response to a preceeding message with 'tool_calls'."
                )
            pending.pop(call_id, None)
            continue
        problems += _unanswered_calls(pending)
        pending = {}
        problems += _chat_content_problems(i, message)
        calls = message.get("tool_calls") if role == "assistant" else None
        if not calls:
            continue
        if not isinstance(calls, list):
            problems.append(f"Invalid type for 'messages[{i}].tool_calls': expected an array.")
            continue
        for j, call in enumerate(calls):
            call_id = str(call.get("id")) if isinstance(call, Mapping) else "None"
            if call_id in seen_ids:
                problems.append(
                    f"messages[{i}].tool_calls[{j}]: Duplicate value for 'tool_call_id' of "
                    f"{call_id} in 'messages'."
                )
            seen_ids.add(call_id)
            pending[call_id] = i
            function = call.get("function") if isinstance(call, Mapping) else None
            arguments = function.get("arguments") if isinstance(function, Mapping) else None
            if not isinstance(arguments, str):
                problems.append(
                    f"Invalid type for 'messages[{i}].tool_calls[{j}].function.arguments': "
                    f"expected a string, but got {_json_kind(arguments)} instead."
                )
    problems += _unanswered_calls(pending)
    return problems + _openai_tools(body.get("tools"), flat=False)


def _unanswered_calls(pending: Mapping[str, int]) -> list[str]:
    if not pending:
        return []
    index = next(iter(pending.values()))
    return [
        f"messages[{index}]: An assistant message with 'tool_calls' must be followed by tool "
        "messages responding to each 'tool_call_id'. The following tool_call_ids did not have "
        f"response messages: {', '.join(pending)}"
    ]


def _json_kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, list):
        return "an array"
    return "an object" if isinstance(value, Mapping) else "a string"


def responses_input(body: Mapping[str, Any]) -> list[Any]:
    """The request's ``input`` as a list of items (a string is one user message)."""
    value = body.get("input")
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    return list(value) if isinstance(value, list) else []


def validate_responses(body: Mapping[str, Any], resolved_input: Sequence[Any]) -> list[str]:
    problems = text_format_problems(body) + _openai_tools(body.get("tools"), flat=True)
    calls: list[str] = []
    outputs: list[str] = []
    for i, item in enumerate(responses_input(body)):
        if isinstance(item, Mapping):
            problems += _responses_content_problems(i, item)
    for item in resolved_input:
        kind = _block_type(item)
        if kind == "function_call":
            call_id = str(item.get("call_id"))
            if call_id in calls:
                problems.append(f"Duplicate value for 'call_id' of {call_id} in 'input'.")
            calls.append(call_id)
        elif kind == "function_call_output":
            call_id = str(item.get("call_id"))
            if call_id in outputs:
                problems.append(
                    f"Duplicate value for 'call_id' of {call_id} in 'input' (function_call_output)."
                )
            outputs.append(call_id)
    problems += [
        f"No tool output found for function call {call_id}."
        for call_id in calls
        if call_id not in outputs
    ]
    problems += [
        f"No tool call found for function call output with call_id {call_id}."
        for call_id in outputs
        if call_id not in calls
    ]
    return problems
