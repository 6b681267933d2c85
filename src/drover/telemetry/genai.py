"""The names spans carry: the OpenTelemetry GenAI semantic conventions and drover's own.

GenAI (development status in the conventions; the names of the current registry):
``gen_ai.operation.name`` (``invoke_agent`` for a turn or a worker, ``chat`` for a model
call, ``execute_tool`` for a tool call), ``gen_ai.provider.name``, ``gen_ai.agent.name``,
``gen_ai.conversation.id`` (the session), ``gen_ai.request.model``,
``gen_ai.request.max_tokens``, ``gen_ai.usage.input_tokens`` / ``output_tokens`` (and the
cache read/creation counts), ``gen_ai.response.time_to_first_chunk``, ``gen_ai.tool.name``,
``gen_ai.tool.call.id``, ``gen_ai.tool.type``, ``error.type``; with content capture on,
``gen_ai.input.messages``, ``gen_ai.output.messages``, ``gen_ai.tool.call.arguments`` and
``gen_ai.tool.call.result`` (JSON strings in the conventions' message shapes).

drover's own: ``drover.turn.state.id``, ``drover.turn.id``, ``drover.turn.status`` (completed,
incomplete, failed, interrupted), ``drover.turn.reason``, ``drover.step``,
``drover.tool.state`` (the call's final state), ``drover.tool.outcome_unknown``,
``drover.worker.index``; span events ``retry`` (``drover.retry.attempt``,
``drover.retry.delay``, ``drover.retry.discard_partial``, ``error.message``) and
``drover.tool.state`` (one per state a call went through).

Content is converted here from drover's neutral messages, after redaction.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from drover.core.messages import (
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)

OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
AGENT_NAME = "gen_ai.agent.name"
CONVERSATION = "gen_ai.conversation.id"
REQUEST_MODEL = "gen_ai.request.model"
MAX_TOKENS = "gen_ai.request.max_tokens"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
CACHE_READ = "gen_ai.usage.cache_read.input_tokens"
CACHE_WRITE = "gen_ai.usage.cache_creation.input_tokens"
FIRST_CHUNK = "gen_ai.response.time_to_first_chunk"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_TYPE = "gen_ai.tool.type"
TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"
TOOL_RESULT = "gen_ai.tool.call.result"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
ERROR_TYPE = "error.type"

SESSION_ID = "drover.turn.state.id"
TURN_ID = "drover.turn.id"
TURN_STATUS = "drover.turn.status"
TURN_REASON = "drover.turn.reason"
STEP = "drover.step"
TOOL_STATE = "drover.tool.state"
OUTCOME_UNKNOWN = "drover.tool.outcome_unknown"
WORKER = "drover.worker.index"

AGENT = "drover"
#: drover's protocol names as GenAI provider names.
_PROVIDERS = {"anthropic": "anthropic", "openai": "openai", "openai-responses": "openai"}


def provider_name(protocol: str) -> str:
    """The ``gen_ai.provider.name`` of a drover protocol (``openai-responses`` → ``openai``)."""
    return _PROVIDERS.get(protocol, protocol)


def _part(block: object) -> dict[str, Any]:
    if isinstance(block, TextBlock):
        return {"type": "text", "content": block.text}
    if isinstance(block, ThinkingBlock):
        return {"type": "reasoning", "content": block.thinking}
    if isinstance(block, ToolUseBlock):
        return {
            "type": "tool_call",
            "id": block.id,
            "name": block.name,
            "arguments": dict(block.input),
        }
    if isinstance(block, ToolResultBlock):
        return {"type": "tool_call_response", "id": block.tool_use_id, "response": block.content}
    return {"type": str(getattr(block, "type", "unknown"))}


def messages_json(messages: list[Message], *, finish_reason: str | None = None) -> str:
    """``messages`` (already redacted) as the conventions' message list, a JSON string."""
    out = []
    for message in messages:
        shaped: dict[str, Any] = {
            "role": message.role,
            "parts": [_part(block) for block in message.content],
        }
        if finish_reason is not None:
            shaped["finish_reason"] = finish_reason
        out.append(shaped)
    return json.dumps(out, ensure_ascii=False)


def arguments_json(arguments: Mapping[str, Any]) -> str:
    return json.dumps(dict(arguments), ensure_ascii=False, default=str)


def answer_json(text: str) -> str:
    """A turn's final answer (already redacted) as the conventions' output message list."""
    parts = [{"type": "text", "content": text}]
    return json.dumps(
        [{"role": "assistant", "parts": parts, "finish_reason": "stop"}], ensure_ascii=False
    )
