"""OpenAI Chat Completions bytes (``POST /v1/chat/completions``), and compatible servers' quirks.

Stream: ``data:`` lines only, ending ``data: [DONE]``. Every chunk carries ``id``, ``object``,
``created``, ``model``, ``service_tier``, ``system_fingerprint`` and ``choices`` (``usage: null``
too when usage was asked for, and an ``obfuscation`` pad unless turned off). The first chunk's
delta is ``{"role": "assistant", "content": "", "refusal": null}``, or, when the answer starts
with a tool call, ``content: null`` plus that call's first fragment. A tool call's first fragment
has ``index``, ``id``, ``type``, ``function.name`` and ``arguments: ""``; later fragments only
``index`` and argument text. Then a chunk with an empty delta and the ``finish_reason``, and with
``stream_options.include_usage`` a last chunk with ``choices: []`` and the usage. Thinking is
sent as ``reasoning_content`` deltas, as DeepSeek, vLLM and llama.cpp do (the official API
streams no reasoning); the ``reasoning_content`` quirk names that behaviour explicitly.

Errors: ``{"error": {"message", "type", "param", "code"}}``, as a body or as a chunk mid-stream.
"""

from __future__ import annotations

from typing import Any

from drover.testing.scenario import ContextOverflow, HttpError, ScriptedResponse, StreamError
from drover.testing.wire import (
    RenderContext,
    RenderedObject,
    RenderedStream,
    Reply,
    Tokens,
    chunks,
    error_defaults,
    obfuscation,
    overflow_tokens,
    sse,
)

SYSTEM_FINGERPRINT = "fp_fake0d1e2f"
DONE = b"data: [DONE]\n\n"

#: Anthropic-style error types in OpenAI's vocabulary: (type, code).
_ERROR_TYPES: dict[str, tuple[str, str | None]] = {
    "invalid_request_error": ("invalid_request_error", None),
    "authentication_error": ("invalid_request_error", "invalid_api_key"),
    "permission_error": ("invalid_request_error", "unsupported_country_region_territory"),
    "not_found_error": ("invalid_request_error", "model_not_found"),
    "request_too_large": ("invalid_request_error", "request_too_large"),
    "rate_limit_error": ("requests", "rate_limit_exceeded"),
    "api_error": ("server_error", None),
    "overloaded_error": ("server_error", None),
    "failed": ("server_error", None),
}


def error_object(error_type: str, message: str, *, param: str | None = None) -> dict[str, Any]:
    openai_type, code = _ERROR_TYPES.get(error_type, (error_type, None))
    return {"error": {"message": message, "type": openai_type, "param": param, "code": code}}


_STREAM_ERROR = StreamError(
    type="api_error",
    message="The server had an error while processing your request. Sorry about that!",
)


def raw_error_frame(error: StreamError | None, ctx: RenderContext, sent: int) -> bytes:
    """The ``data: {"error": …}`` chunk that ends a stream part-way (rendered or recorded)."""
    error = error or _STREAM_ERROR
    return sse(error_object(error.type, error.message))


def finish_reason(response: ScriptedResponse) -> str:
    reason = response.resolved_stop_reason
    if reason == "tool_use":
        return "stop" if "stop_on_tool_call" in response.quirks else "tool_calls"
    if reason == "max_tokens":
        return "length"
    if reason == "refusal":
        return "content_filter"
    return "stop"


def usage_object(tokens: Tokens) -> dict[str, Any]:
    return {
        "prompt_tokens": tokens.prompt_total,
        "completion_tokens": tokens.output,
        "total_tokens": tokens.prompt_total + tokens.output,
        "prompt_tokens_details": {"cached_tokens": tokens.cache_read, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": tokens.reasoning,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def _call_ids(response: ScriptedResponse, ctx: RenderContext) -> list[str | None]:
    if "no_ids" in response.quirks:
        return [None for _ in response.tool_calls]
    ids = [call.id or ctx.ids.next("call_") for call in response.tool_calls]
    if "repeated_ids" in response.quirks and ids:
        return [ids[0] for _ in ids]
    return list(ids)


def _tool_deltas(response: ScriptedResponse, ctx: RenderContext) -> list[dict[str, Any]]:
    """One ``tool_calls`` list per chunk, in call order."""
    deltas: list[dict[str, Any]] = []
    whole = "args_whole" in response.quirks
    for index, (call, call_id) in enumerate(
        zip(response.tool_calls, _call_ids(response, ctx), strict=True)
    ):
        arguments = call.arguments()
        first: dict[str, Any] = {"index": index}
        if call_id is not None:
            first["id"] = call_id
        first["type"] = "function"
        first["function"] = {"name": call.name, "arguments": arguments if whole else ""}
        deltas.append({"tool_calls": [first]})
        if not whole:
            for piece in chunks(arguments, ctx.options.json_chunk):
                deltas.append({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    return deltas


def _include_usage(body: Any) -> bool:
    options = body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


def _include_obfuscation(body: Any) -> bool:
    options = body.get("stream_options")
    return not (isinstance(options, dict) and options.get("include_obfuscation") is False)


def render_stream(response: ScriptedResponse, ctx: RenderContext) -> RenderedStream:
    completion_id = ctx.ids.next("chatcmpl-", 29)
    request_id = ctx.ids.next("req_")
    tokens = ctx.tokens(response)
    quirks = response.quirks
    with_usage = _include_usage(ctx.body) and "no_usage" not in quirks
    with_padding = _include_obfuscation(ctx.body)

    def chunk(delta: dict[str, Any] | None, reason: str | None = None) -> bytes:
        payload: dict[str, Any] = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": ctx.created,
            "model": ctx.model,
            "service_tier": "default",
            "system_fingerprint": SYSTEM_FINGERPRINT,
            "choices": []
            if delta is None
            else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}],
        }
        if delta is None:
            payload["usage"] = usage_object(tokens)
        elif with_usage:
            payload["usage"] = None
        if with_padding:
            text = "" if delta is None else str(delta.get("content") or "")
            payload["obfuscation"] = obfuscation(text)
        return sse(payload)

    size = ctx.options.chunk_size
    deltas: list[dict[str, Any]] = [
        {"reasoning_content": piece} for piece in chunks(response.thinking or "", size)
    ]
    deltas += [{"content": piece} for piece in chunks(response.text or "", size)]
    tool_deltas = _tool_deltas(response, ctx)
    if "no_role_chunk" not in quirks:
        role: dict[str, Any] = {"role": "assistant", "content": "", "refusal": None}
        if not deltas and tool_deltas:
            # A reply that opens with a tool call carries it in the role chunk.
            role = {"role": "assistant", "content": None, **tool_deltas.pop(0), "refusal": None}
        deltas.insert(0, role)
    deltas += tool_deltas
    frames = [chunk(delta) for delta in deltas]
    frames.append(chunk({}, finish_reason(response)))
    if with_usage:
        frames.append(chunk(None))
    frames.append(DONE)

    def error_frame(sent: int) -> bytes:
        return raw_error_frame(response.error, ctx, sent)

    return RenderedStream(
        frames=tuple(frames), error_frame=error_frame, headers=(("x-request-id", request_id),)
    )


def render_object(response: ScriptedResponse, ctx: RenderContext) -> RenderedObject:
    tokens = ctx.tokens(response)
    message: dict[str, Any] = {
        "role": "assistant",
        "content": response.text or None,
        "refusal": None,
        "annotations": [],
    }
    if response.thinking:
        message["reasoning_content"] = response.thinking
    if response.tool_calls:
        message["tool_calls"] = [
            {
                **({"id": call_id} if call_id is not None else {}),
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments()},
            }
            for call, call_id in zip(response.tool_calls, _call_ids(response, ctx), strict=True)
        ]
    body = {
        "id": ctx.ids.next("chatcmpl-", 29),
        "object": "chat.completion",
        "created": ctx.created,
        "model": ctx.model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish_reason(response),
            }
        ],
        "usage": usage_object(tokens),
        "service_tier": "default",
        "system_fingerprint": SYSTEM_FINGERPRINT,
    }
    return RenderedObject(body=body, headers=(("x-request-id", ctx.ids.next("req_")),))


def error_reply(
    status: int,
    error_type: str,
    message: str,
    ctx: RenderContext,
    *,
    param: str | None = None,
    code: str | None = None,
    retry_after: float | None = None,
) -> Reply:
    """An OpenAI error reply (shared by Chat Completions and Responses)."""
    body = error_object(error_type, message, param=param)
    if code is not None:
        body["error"]["code"] = code
    headers = [("x-request-id", ctx.ids.next("req_"))]
    if retry_after is None and status == 429:
        retry_after = 0.0
    if retry_after is not None:
        headers.append(("retry-after", f"{retry_after:g}"))
    return Reply(status=status, body=body, headers=tuple(headers))


def http_error(spec: HttpError, ctx: RenderContext) -> Reply:
    default_type, default_message = error_defaults(spec.status)
    return error_reply(
        spec.status,
        spec.type or default_type,
        spec.message or default_message,
        ctx,
        retry_after=spec.retry_after,
    )


def context_overflow(spec: ContextOverflow, ctx: RenderContext) -> Reply:
    """The 400 with code ``context_length_exceeded`` for messages over the context window."""
    message = (
        f"This model's maximum context length is {spec.limit} tokens. However, your messages "
        f"resulted in {overflow_tokens(spec, ctx)} tokens. Please reduce the length of the "
        "messages."
    )
    return error_reply(
        400,
        "invalid_request_error",
        message,
        ctx,
        param="messages",
        code="context_length_exceeded",
    )


def invalid_request(message: str, ctx: RenderContext) -> Reply:
    return error_reply(400, "invalid_request_error", message, ctx)
