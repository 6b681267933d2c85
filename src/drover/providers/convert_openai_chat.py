"""Neutral history and tools → OpenAI Chat Completions request parameters.

* The system prompt is the first message (``role: system``).
* An assistant message carries its text as ``content`` (``None`` when it only calls tools) and
  its calls as ``tool_calls`` with the arguments as a JSON string.
* Each tool result becomes a ``tool`` message with its ``tool_call_id``, in call order, right
  after the assistant message; a user message's own text follows them (as content parts when
  it has images: ``text`` and ``image_url`` with a ``data:`` URL). The Chat API has no error
  flag, so an error result's content is prefixed with ``Error:``.
* Thinking is dropped, whatever provider it came from. The official API takes no reasoning
  back, and the compatible servers that stream ``reasoning_content`` either ignore it in input
  or refuse it (DeepSeek answers 400), so sending it would gain nothing and risk a failure.
* Ids are fitted to the API's 40-character limit, pairs kept matched
  (:class:`~drover.providers.ids.ToolIdMapper`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from typing import assert_never

from openai.types.chat import (
    ChatCompletionAssistantMessageParam,
    ChatCompletionContentPartParam,
    ChatCompletionFunctionToolParam,
    ChatCompletionMessageFunctionToolCallParam,
    ChatCompletionMessageParam,
)

from drover.core.messages import (
    ContentBlock,
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
)
from drover.core.messages import ToolUseBlock as NeutralToolUse
from drover.core.model_stream import ToolSpec
from drover.providers.convert_common import data_url, has_text, normalise_history, user_parts
from drover.providers.ids import CHAT_IDS, ToolIdMapper

ERROR_PREFIX = "Error: "


def _sendable(block: ContentBlock) -> bool:
    match block:
        case TextBlock():
            return has_text(block)
        case ThinkingBlock():
            return False
        case NeutralToolUse() | ToolResultBlock():
            return True
        case ImageBlock():
            return bool(block.data)
        case _:
            assert_never(block)


def error_content(result: ToolResultBlock) -> str:
    """A result's content as the model should read it (errors say so: no API flag for it)."""
    if not result.is_error or result.content.lower().startswith("error"):
        return result.content
    return ERROR_PREFIX + result.content


#: ``json.dumps(..., ensure_ascii=False)``, its encoder built once rather than per call.
_ARGUMENTS_JSON = json.JSONEncoder(ensure_ascii=False)
#: The C encoder ``JSONEncoder.encode`` builds anew on every call (most of the cost of encoding
#: a small input), built once: the same text for JSON values. No circular-reference check: a
#: tool's input is decoded JSON. Where the C module is missing, the encoder above does it.
_ENCODE_ARGUMENTS = (
    None
    if c_make_encoder is None
    else c_make_encoder(
        None, _ARGUMENTS_JSON.default, encode_basestring, None, ": ", ", ", False, False, True
    )
)


def arguments_json(block: NeutralToolUse) -> str:
    if _ENCODE_ARGUMENTS is None:
        return _ARGUMENTS_JSON.encode(dict(block.input))
    return "".join(_ENCODE_ARGUMENTS(dict(block.input), 0))


def to_chat_messages(system: str, messages: Iterable[Message]) -> list[ChatCompletionMessageParam]:
    """The ``messages`` parameter: system prompt first, then the converted history."""
    out: list[ChatCompletionMessageParam] = []
    if system:
        out.append({"role": "system", "content": system})
    ids = ToolIdMapper(CHAT_IDS)
    for message in normalise_history(messages, keep=_sendable):
        if message.role == "assistant":
            out.append(_assistant(message, ids))
            continue
        results, parts = user_parts(message)
        for result in results:
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": ids.result(result.tool_use_id),
                    "content": error_content(result),
                }
            )
        if any(isinstance(part, ImageBlock) for part in parts):
            out.append({"role": "user", "content": [_content_part(part) for part in parts]})
        elif parts:
            text = "\n\n".join(p.text for p in parts if isinstance(p, TextBlock))
            out.append({"role": "user", "content": text})
    return out


def _content_part(part: TextBlock | ImageBlock) -> ChatCompletionContentPartParam:
    if isinstance(part, ImageBlock):
        return {"type": "image_url", "image_url": {"url": data_url(part)}}
    return {"type": "text", "text": part.text}


def _assistant(message: Message, ids: ToolIdMapper) -> ChatCompletionAssistantMessageParam:
    texts: list[str] = []
    calls: list[ChatCompletionMessageFunctionToolCallParam] = []
    for block in message.content:
        if isinstance(block, TextBlock):
            texts.append(block.text)
        elif isinstance(block, NeutralToolUse):
            calls.append(
                {
                    "id": ids.call(block.id),
                    "type": "function",
                    "function": {"name": block.name, "arguments": arguments_json(block)},
                }
            )
    entry: ChatCompletionAssistantMessageParam = {
        "role": "assistant",
        "content": "\n\n".join(texts) or None,
    }
    if calls:
        entry["tool_calls"] = calls
    return entry


def to_chat_tools(tools: Sequence[ToolSpec]) -> list[ChatCompletionFunctionToolParam]:
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": dict(tool.input_schema),
            },
        }
        for tool in tools
    ]
