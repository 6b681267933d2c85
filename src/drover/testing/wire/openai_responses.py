"""OpenAI Responses API bytes (``POST /v1/responses``), as the real API sends them.

Stream: ``event:`` + ``data:`` frames whose payload has ``type`` first and a ``sequence_number``
counting from 0. ``response.created`` and ``response.in_progress`` carry the response object;
then each output item is opened by ``response.output_item.added`` and closed by
``response.output_item.done``: a reasoning item (summary part, ``reasoning_summary_text`` deltas,
and ``encrypted_content`` when the request includes ``reasoning.encrypted_content``), a message
(content part, ``output_text`` deltas with ``logprobs: []``), function calls (item id ``fc_…``,
``call_id`` ``call_…``, ``function_call_arguments`` deltas). ``response.completed`` — or
``response.incomplete`` with ``incomplete_details`` for ``max_tokens`` / ``refusal`` — ends it
with the whole response and its usage.

A failure part-way is an ``error`` event (``code``, ``message``, ``param``, no ``error`` key), or
``response.failed`` for ``error: {type: failed}``. Finished responses are handed to
``ctx.remember`` so ``previous_response_id`` can chain to them.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from drover.testing.scenario import ContextOverflow, HttpError, ScriptedResponse, StreamError
from drover.testing.wire import (
    RenderContext,
    RenderedObject,
    RenderedStream,
    Reply,
    Tokens,
    chunks,
    obfuscation,
    sse,
)
from drover.testing.wire.openai_chat import error_reply
from drover.testing.wire.openai_chat import http_error as _chat_http_error

_ERROR_CODES = {
    "overloaded_error": "server_error",
    "api_error": "server_error",
    "failed": "server_error",
    "rate_limit_error": "rate_limit_exceeded",
}


def encrypted_content_for(thinking: str) -> str:
    """A stable stand-in for the opaque ``encrypted_content`` of a reasoning item."""
    digest = hashlib.sha256(thinking.encode()).digest()
    return "gAAAAAB" + base64.urlsafe_b64encode(digest * 2).decode()


def usage_object(tokens: Tokens) -> dict[str, Any]:
    return {
        "input_tokens": tokens.prompt_total,
        "input_tokens_details": {
            "cache_write_tokens": tokens.cache_creation,
            "cached_tokens": tokens.cache_read,
        },
        "output_tokens": tokens.output,
        "output_tokens_details": {"reasoning_tokens": tokens.reasoning},
        "total_tokens": tokens.prompt_total + tokens.output,
    }


def _status(response: ScriptedResponse) -> tuple[str, dict[str, Any] | None]:
    reason = response.resolved_stop_reason
    if reason == "max_tokens":
        return "incomplete", {"reason": "max_output_tokens"}
    if reason == "refusal":
        return "incomplete", {"reason": "content_filter"}
    return "completed", None


def response_object(
    ctx: RenderContext,
    response_id: str,
    *,
    status: str,
    output: list[dict[str, Any]],
    usage: dict[str, Any] | None,
    incomplete: dict[str, Any] | None = None,
    error: dict[str, Any] | None = None,
) -> dict[str, Any]:
    body = ctx.body
    reasoning = body.get("reasoning")
    reasoning = reasoning if isinstance(reasoning, dict) else {}
    return {
        "id": response_id,
        "object": "response",
        "created_at": ctx.created,
        "status": status,
        "background": False,
        "completed_at": ctx.created if status == "completed" else None,
        "error": error,
        "incomplete_details": incomplete,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "max_tool_calls": body.get("max_tool_calls"),
        "model": ctx.model,
        "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "prompt_cache_key": body.get("prompt_cache_key"),
        "reasoning": {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")},
        "safety_identifier": body.get("safety_identifier"),
        "service_tier": "default",
        "store": body.get("store", True),
        "temperature": body.get("temperature", 1.0),
        "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools", []),
        "top_logprobs": 0,
        "top_p": body.get("top_p", 1.0),
        "truncation": body.get("truncation", "disabled"),
        "usage": usage,
        "user": None,
        "metadata": body.get("metadata") or {},
    }


def _wants_encrypted_reasoning(body: Any) -> bool:
    include = body.get("include")
    return isinstance(include, list) and "reasoning.encrypted_content" in include


def _padding(body: Any) -> bool:
    options = body.get("stream_options")
    return not (isinstance(options, dict) and options.get("include_obfuscation") is False)


class _Events:
    """Frames with ``type`` first, then the fields in name order, ``sequence_number`` included."""

    def __init__(self, padding: bool) -> None:
        self.frames: list[bytes] = []
        self._padding = padding

    def add(self, event_type: str, **fields: Any) -> None:
        fields["sequence_number"] = len(self.frames)
        if self._padding and "delta" in fields:
            fields["obfuscation"] = obfuscation(str(fields["delta"]))
        payload = {"type": event_type, **dict(sorted(fields.items()))}
        self.frames.append(sse(payload, event_type))


def _output_items(
    response: ScriptedResponse, ctx: RenderContext, status: str
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Each output item as (item when added, item when done)."""
    items: list[tuple[dict[str, Any], dict[str, Any]]] = []
    if response.thinking:
        item: dict[str, Any] = {"id": ctx.ids.next("rs_", 50), "type": "reasoning"}
        if _wants_encrypted_reasoning(ctx.body):
            item["encrypted_content"] = encrypted_content_for(response.thinking)
        summary = [{"type": "summary_text", "text": response.thinking}]
        items.append(({**item, "summary": []}, {**item, "summary": summary}))
    if response.text:
        head = {"id": ctx.ids.next("msg_", 50), "type": "message"}
        part = {"type": "output_text", "annotations": [], "logprobs": [], "text": response.text}
        message_status = "incomplete" if status == "incomplete" else "completed"
        items.append(
            (
                {**head, "status": "in_progress", "content": [], "role": "assistant"},
                {**head, "status": message_status, "content": [part], "role": "assistant"},
            )
        )
    for call in response.tool_calls:
        head = {"id": ctx.ids.next("fc_", 50), "type": "function_call"}
        call_id = call.id or ctx.ids.next("call_")
        rest = {"call_id": call_id, "name": call.name}
        items.append(
            (
                {**head, "status": "in_progress", "arguments": "", **rest},
                {**head, "status": "completed", "arguments": call.arguments(), **rest},
            )
        )
    return items


def _item_events(
    events: _Events, index: int, added: dict[str, Any], done: dict[str, Any], ctx: RenderContext
) -> None:
    size = ctx.options.chunk_size
    item_id = added["id"]
    where = {"item_id": item_id, "output_index": index}
    events.add("response.output_item.added", item=added, output_index=index)
    if done["type"] == "reasoning":
        text = done["summary"][0]["text"]
        empty_part = {"type": "summary_text", "text": ""}
        events.add(
            "response.reasoning_summary_part.added", part=empty_part, summary_index=0, **where
        )
        for piece in chunks(text, size):
            events.add(
                "response.reasoning_summary_text.delta", delta=piece, summary_index=0, **where
            )
        events.add("response.reasoning_summary_text.done", text=text, summary_index=0, **where)
        events.add(
            "response.reasoning_summary_part.done",
            part=done["summary"][0],
            summary_index=0,
            **where,
        )
    elif done["type"] == "message":
        part = done["content"][0]
        empty_part = {**part, "text": ""}
        events.add("response.content_part.added", content_index=0, part=empty_part, **where)
        for piece in chunks(part["text"], size):
            events.add(
                "response.output_text.delta", content_index=0, delta=piece, logprobs=[], **where
            )
        events.add(
            "response.output_text.done", content_index=0, logprobs=[], text=part["text"], **where
        )
        events.add("response.content_part.done", content_index=0, part=part, **where)
    else:
        for piece in chunks(done["arguments"], ctx.options.json_chunk):
            events.add("response.function_call_arguments.delta", delta=piece, **where)
        events.add("response.function_call_arguments.done", arguments=done["arguments"], **where)
    events.add("response.output_item.done", item=done, output_index=index)


_STREAM_ERROR = StreamError(
    type="api_error", message="An error occurred while processing your request."
)


def _error_event(
    error: StreamError | None, ctx: RenderContext, response_id: str, sent: int
) -> bytes:
    """``error`` (or ``response.failed`` for ``type: failed``) after ``sent`` events."""
    error = error or _STREAM_ERROR
    code = _ERROR_CODES.get(error.type, error.type)
    if error.type == "failed":
        failed = response_object(
            ctx,
            response_id,
            status="failed",
            output=[],
            usage=None,
            error={"code": code, "message": error.message},
        )
        payload = {"type": "response.failed", "response": failed, "sequence_number": sent}
        return sse(payload, "response.failed")
    payload = {
        "type": "error",
        "code": code,
        "message": error.message,
        "param": None,
        "sequence_number": sent,
    }
    return sse(payload, "error")


def raw_error_frame(error: StreamError | None, ctx: RenderContext, sent: int) -> bytes:
    """The error event that cuts a recorded (``raw``) stream short after ``sent`` frames."""
    return _error_event(error, ctx, ctx.ids.next("resp_", 50), sent)


def render_stream(response: ScriptedResponse, ctx: RenderContext) -> RenderedStream:
    response_id = ctx.ids.next("resp_", 50)
    request_id = ctx.ids.next("req_")
    status, incomplete = _status(response)
    items = _output_items(response, ctx, status)
    output = [done for _added, done in items]
    usage = usage_object(ctx.tokens(response))
    events = _Events(_padding(ctx.body))
    opening = response_object(ctx, response_id, status="in_progress", output=[], usage=None)
    events.add("response.created", response=opening)
    events.add("response.in_progress", response=opening)
    for index, (added, done) in enumerate(items):
        _item_events(events, index, added, done, ctx)
    final = response_object(
        ctx, response_id, status=status, output=output, usage=usage, incomplete=incomplete
    )
    events.add(f"response.{status}", response=final)

    def error_frame(sent: int) -> bytes:
        return _error_event(response.error, ctx, response_id, sent)

    return RenderedStream(
        frames=tuple(events.frames),
        error_frame=error_frame,
        on_complete=lambda: ctx.remember(response_id, output),
        headers=(("x-request-id", request_id),),
    )


def render_object(response: ScriptedResponse, ctx: RenderContext) -> RenderedObject:
    response_id = ctx.ids.next("resp_", 50)
    status, incomplete = _status(response)
    output = [done for _added, done in _output_items(response, ctx, status)]
    body = response_object(
        ctx,
        response_id,
        status=status,
        output=output,
        usage=usage_object(ctx.tokens(response)),
        incomplete=incomplete,
    )
    return RenderedObject(
        body=body,
        on_complete=lambda: ctx.remember(response_id, output),
        headers=(("x-request-id", ctx.ids.next("req_")),),
    )


def http_error(spec: HttpError, ctx: RenderContext) -> Reply:
    return _chat_http_error(spec, ctx)


OVERFLOW_MESSAGE = (
    "Your input exceeds the context window of this model. Please adjust your input and try again."
)
OVERFLOW_CODE = "context_length_exceeded"


def context_overflow(spec: ContextOverflow, ctx: RenderContext) -> Reply:
    """The 400 with code ``context_length_exceeded`` for input over the context window."""
    return error_reply(
        400, "invalid_request_error", OVERFLOW_MESSAGE, ctx, param="input", code=OVERFLOW_CODE
    )


def context_overflow_stream(spec: ContextOverflow, ctx: RenderContext) -> RenderedStream:
    """A stream that opens, then fails with ``context_length_exceeded``: a ``response.failed``
    event (``mid_stream: failed``) or an ``error`` event (``mid_stream: error``)."""
    response_id = ctx.ids.next("resp_", 50)
    events = _Events(_padding(ctx.body))
    opening = response_object(ctx, response_id, status="in_progress", output=[], usage=None)
    events.add("response.created", response=opening)
    events.add("response.in_progress", response=opening)
    if spec.mid_stream == "error":
        events.add("error", code=OVERFLOW_CODE, message=OVERFLOW_MESSAGE, param="input")
    else:
        failed = response_object(
            ctx,
            response_id,
            status="failed",
            output=[],
            usage=None,
            error={"code": OVERFLOW_CODE, "message": OVERFLOW_MESSAGE},
        )
        events.add("response.failed", response=failed)
    return RenderedStream(
        frames=tuple(events.frames),
        error_frame=lambda _sent: b"",
        headers=(("x-request-id", ctx.ids.next("req_")),),
    )


def invalid_request(message: str, ctx: RenderContext) -> Reply:
    return error_reply(400, "invalid_request_error", message, ctx, param="input")


def previous_response_not_found(response_id: str, ctx: RenderContext) -> Reply:
    message = f"Previous response with id '{response_id}' not found."
    return error_reply(
        400,
        "invalid_request_error",
        message,
        ctx,
        param="previous_response_id",
        code="previous_response_not_found",
    )
