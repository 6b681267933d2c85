"""Anthropic Messages API bytes (``POST /v1/messages``), as the real API sends them.

Stream: ``message_start`` (the message with empty content and usage so far), then per block
``content_block_start`` / ``content_block_delta``… / ``content_block_stop`` — thinking
(``thinking_delta``… then one ``signature_delta``), text (``text_delta``), tool use
(``input_json_delta`` whose first ``partial_json`` is ``""``) — then ``message_delta`` (stop
reason and cumulative usage) and ``message_stop``. Like recorded real streams, ``ping`` comes
right after the first ``content_block_start`` (after ``message_start`` when there is no block).
Every ``data:`` payload is compact JSON except ping's, which the API spaces. A failure part-way
is an ``event: error`` frame; HTTP errors carry ``{"type": "error", "error": {…},
"request_id": …}`` and a ``request-id`` header.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from drover.testing.scenario import (
    ContextOverflow,
    HttpError,
    ScriptedResponse,
    StreamError,
    ToolCall,
)
from drover.testing.wire import (
    RenderContext,
    RenderedObject,
    RenderedStream,
    Reply,
    Tokens,
    chunks,
    error_defaults,
    overflow_tokens,
    sse,
)

PING = b'event: ping\ndata: {"type": "ping"}\n\n'


def signature_for(thinking: str) -> str:
    """A stable stand-in for the opaque signature of a thinking block."""
    digest = hashlib.sha256(thinking.encode()).digest()
    return "Eq" + base64.b64encode(digest * 3).decode()


def _tool_id(call: ToolCall, ctx: RenderContext) -> str:
    return call.id if call.id is not None else ctx.ids.next("toolu_01")


def _usage(tokens: Tokens, *, output: int) -> dict[str, Any]:
    return {
        "input_tokens": tokens.input,
        "cache_creation_input_tokens": tokens.cache_creation,
        "cache_read_input_tokens": tokens.cache_read,
        "cache_creation": {
            "ephemeral_5m_input_tokens": tokens.cache_creation,
            "ephemeral_1h_input_tokens": 0,
        },
        "output_tokens": output,
        "service_tier": "standard",
    }


def _stop_sequence(response: ScriptedResponse, ctx: RenderContext) -> str | None:
    if response.resolved_stop_reason != "stop_sequence":
        return None
    sequences = ctx.body.get("stop_sequences")
    if isinstance(sequences, list) and sequences and isinstance(sequences[0], str):
        return sequences[0]
    return None


def _blocks(
    response: ScriptedResponse, ctx: RenderContext
) -> list[tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]]:
    """Each block as (start object, deltas, final object for the non-streamed message)."""
    size, json_size = ctx.options.chunk_size, ctx.options.json_chunk
    blocks: list[tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]] = []
    if response.thinking:
        signature = signature_for(response.thinking)
        deltas: list[dict[str, Any]] = [
            {"type": "thinking_delta", "thinking": piece}
            for piece in chunks(response.thinking, size)
        ]
        deltas.append({"type": "signature_delta", "signature": signature})
        final: dict[str, Any] = {
            "type": "thinking",
            "thinking": response.thinking,
            "signature": signature,
        }
        blocks.append(({"type": "thinking", "thinking": "", "signature": ""}, deltas, final))
    if response.text:
        deltas = [{"type": "text_delta", "text": piece} for piece in chunks(response.text, size)]
        final = {"type": "text", "text": response.text}
        blocks.append(({"type": "text", "text": ""}, deltas, final))
    for call in response.tool_calls:
        tool_id = _tool_id(call, ctx)
        start: dict[str, Any] = {
            "type": "tool_use",
            "id": tool_id,
            "name": call.name,
            "caller": {"type": "direct"},
            "input": {},
        }
        pieces = ["", *chunks(call.arguments(spaced=True), json_size)]
        deltas = [{"type": "input_json_delta", "partial_json": piece} for piece in pieces]
        final = {"type": "tool_use", "id": tool_id, "name": call.name, "input": call.parsed_input()}
        blocks.append((start, deltas, final))
    return blocks


def error_body(error_type: str, message: str, request_id: str) -> dict[str, Any]:
    return {
        "type": "error",
        "error": {"type": error_type, "message": message},
        "request_id": request_id,
    }


def _stream_error_type(error: StreamError) -> str:
    return "api_error" if error.type == "failed" else error.type


def _error_event(error: StreamError | None, request_id: str) -> bytes:
    error = error or StreamError()
    return sse(error_body(_stream_error_type(error), error.message, request_id), "error")


def raw_error_frame(error: StreamError | None, ctx: RenderContext, sent: int) -> bytes:
    """The ``event: error`` that cuts a recorded (``raw``) stream short."""
    return _error_event(error, ctx.ids.next("req_011"))


def render_stream(response: ScriptedResponse, ctx: RenderContext) -> RenderedStream:
    request_id = ctx.ids.next("req_011")
    tokens = ctx.tokens(response)
    message: dict[str, Any] = {
        "id": ctx.ids.next("msg_01"),
        "type": "message",
        "role": "assistant",
        "model": ctx.model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": _usage(tokens, output=min(1, tokens.output)),
    }
    frames = [sse({"type": "message_start", "message": message}, "message_start")]
    blocks = _blocks(response, ctx)
    if ctx.options.ping and not blocks:
        frames.append(PING)
    for index, (start, deltas, _final) in enumerate(blocks):
        start_event = {"type": "content_block_start", "index": index, "content_block": start}
        frames.append(sse(start_event, "content_block_start"))
        if index == 0 and ctx.options.ping:
            frames.append(PING)
        for delta in deltas:
            event = {"type": "content_block_delta", "index": index, "delta": delta}
            frames.append(sse(event, "content_block_delta"))
        frames.append(sse({"type": "content_block_stop", "index": index}, "content_block_stop"))
    message_delta = {
        "type": "message_delta",
        "delta": {
            "stop_reason": response.resolved_stop_reason,
            "stop_sequence": _stop_sequence(response, ctx),
        },
        "usage": {
            "input_tokens": tokens.input,
            "cache_creation_input_tokens": tokens.cache_creation,
            "cache_read_input_tokens": tokens.cache_read,
            "output_tokens": tokens.output,
        },
    }
    frames.append(sse(message_delta, "message_delta"))
    frames.append(sse({"type": "message_stop"}, "message_stop"))

    def error_frame(_sent: int) -> bytes:
        return _error_event(response.error, request_id)

    return RenderedStream(
        frames=tuple(frames), error_frame=error_frame, headers=(("request-id", request_id),)
    )


def render_object(response: ScriptedResponse, ctx: RenderContext) -> RenderedObject:
    request_id = ctx.ids.next("req_011")
    tokens = ctx.tokens(response)
    body = {
        "id": ctx.ids.next("msg_01"),
        "type": "message",
        "role": "assistant",
        "model": ctx.model,
        "content": [final for _start, _deltas, final in _blocks(response, ctx)],
        "stop_reason": response.resolved_stop_reason,
        "stop_sequence": _stop_sequence(response, ctx),
        "usage": _usage(tokens, output=tokens.output),
    }
    return RenderedObject(body=body, headers=(("request-id", request_id),))


def http_error(spec: HttpError, ctx: RenderContext) -> Reply:
    default_type, default_message = error_defaults(spec.status)
    request_id = ctx.ids.next("req_011")
    headers = [("request-id", request_id)]
    retry_after = (
        spec.retry_after if spec.retry_after is not None else (0.0 if spec.status == 429 else None)
    )
    if retry_after is not None:
        headers.append(("retry-after", f"{retry_after:g}"))
    body = error_body(spec.type or default_type, spec.message or default_message, request_id)
    return Reply(status=spec.status, body=body, headers=tuple(headers))


def context_overflow(spec: ContextOverflow, ctx: RenderContext) -> Reply:
    """The 400 for a prompt over the context window: "prompt is too long: N tokens > M maximum"."""
    message = f"prompt is too long: {overflow_tokens(spec, ctx)} tokens > {spec.limit} maximum"
    return http_error(HttpError(status=400, type="invalid_request_error", message=message), ctx)


def invalid_request(message: str, ctx: RenderContext) -> Reply:
    return http_error(HttpError(status=400, type="invalid_request_error", message=message), ctx)
