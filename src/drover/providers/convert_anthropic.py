"""Neutral history and tools → Anthropic Messages API request parameters.

* Thinking: a block with a signature goes back unchanged (``thinking`` + ``signature``); a
  redacted one as ``redacted_thinking`` with its data. Unsigned thinking (another provider's
  reasoning) is dropped: the API refuses it, and it was never this model's to continue.
* Tool calls and results keep their pairing through :class:`~drover.providers.ids.ToolIdMapper`
  (ids from other APIs are made to match ``^[a-zA-Z0-9_-]+$``); ``is_error`` is kept.
* Same-role runs are merged, tool results come first in their user message, empty text blocks
  are left out (the API refuses them), and the first message is a user message.
* An image of a user's message is an ``image`` block with a ``base64`` source.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import assert_never

from anthropic.types import (
    Base64ImageSourceParam,
    ContentBlockParam,
    ImageBlockParam,
    MessageParam,
    ToolParam,
    ToolResultBlockParam,
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
from drover.providers.convert_common import has_text, normalise_history
from drover.providers.ids import ANTHROPIC_IDS, ToolIdMapper

#: Sent when a history would otherwise open with an assistant message.
OPENING_TEXT = "(continuing an earlier conversation)"


def _sendable(block: ContentBlock) -> bool:
    match block:
        case TextBlock():
            return has_text(block)
        case ThinkingBlock():
            return block.redacted_data is not None or bool(block.signature)
        case NeutralToolUse() | ToolResultBlock():
            return True
        case ImageBlock():
            return bool(block.data)
        case _:
            assert_never(block)


def _block_param(block: ContentBlock, ids: ToolIdMapper) -> ContentBlockParam:
    match block:
        case TextBlock():
            return {"type": "text", "text": block.text}
        case ThinkingBlock():
            if block.redacted_data is not None:
                return {"type": "redacted_thinking", "data": block.redacted_data}
            return {
                "type": "thinking",
                "thinking": block.thinking,
                "signature": block.signature or "",
            }
        case NeutralToolUse():
            return {
                "type": "tool_use",
                "id": ids.call(block.id),
                "name": block.name,
                "input": dict(block.input),
            }
        case ToolResultBlock():
            result: ToolResultBlockParam = {
                "type": "tool_result",
                "tool_use_id": ids.result(block.tool_use_id),
            }
            if block.content:
                result["content"] = block.content
            if block.is_error:
                result["is_error"] = True
            return result
        case ImageBlock():
            source: Base64ImageSourceParam = {
                "type": "base64",
                "media_type": block.media_type,  # type: ignore[typeddict-item]
                "data": block.data,
            }
            image: ImageBlockParam = {"type": "image", "source": source}
            return image
        case _:
            assert_never(block)


def to_anthropic_messages(messages: Iterable[Message]) -> list[MessageParam]:
    """The ``messages`` parameter for a neutral history."""
    history = normalise_history(messages, keep=_sendable)
    ids = ToolIdMapper(ANTHROPIC_IDS)
    out: list[MessageParam] = []
    if history and history[0].role == "assistant":
        out.append({"role": "user", "content": [{"type": "text", "text": OPENING_TEXT}]})
    for message in history:
        blocks = [_block_param(block, ids) for block in message.content]
        if message.role == "user":
            out.append({"role": "user", "content": blocks})
        else:
            out.append({"role": "assistant", "content": blocks})
    return out


def to_anthropic_tools(tools: Sequence[ToolSpec]) -> list[ToolParam]:
    return [
        {
            "name": tool.name,
            "description": tool.description,
            "input_schema": dict(tool.input_schema),
        }
        for tool in tools
    ]
