"""``anthropic:MODEL`` — the Anthropic Messages API through the official ``anthropic`` SDK.

Streams with ``messages.create(stream=True)``: the raw server-sent events, not the SDK's
accumulating ``stream()`` helper, so partial text and partial tool-input JSON are seen as they
arrive. :class:`AnthropicEvents` maps them onto neutral stream events:

* ``message_start`` → :class:`UsageUpdate`; ``message_delta`` → the stop reason and a cumulative
  :class:`UsageUpdate`; ``message_stop`` → :class:`StreamEnd` (meta: provider, message id,
  model). A stream that stops without ``message_stop`` and without a stop reason was cut off:
  :class:`StreamError`.
* ``content_block_start/delta/stop`` → :class:`BlockStart` / :class:`BlockDelta` /
  :class:`BlockStop` at the API's index: text, thinking (``thinking_delta`` and the one
  ``signature_delta``), redacted thinking (its data delivered whole, as ``redacted_data`` in
  the :class:`BlockStop` meta) and tool use (``input_json_delta`` fragments as ``input_json``
  deltas; an input sent whole in the start event is passed on at the stop). Server tools and
  block or delta kinds drover does not know are skipped, as are ``ping`` and unknown events.
* an ``error`` event (which the SDK raises) → :class:`StreamError`, retryable when the error
  type is (``overloaded_error``, ``api_error``…).
* a 400 "prompt is too long: N tokens > M maximum" → :class:`ContextOverflowError`; an error
  status whose body is not the API's JSON (a wrong ``--base-url``) names the URL it tried.

Structured output (``request.output``) is asked for natively with ``output_config.format``
``json_schema`` (:mod:`drover.providers.output_format`); a model without structured outputs
answers that with a 400, which fails the turn with the API's message. The schema is adapted
by the SDK's own ``transform_schema`` (what ``output_format=`` of ``messages.parse`` sends).

Usage: neutral ``input_tokens`` counts every prompt token, cached ones included
(``input_tokens + cache_read_input_tokens + cache_creation_input_tokens``), so it compares
with the size of the request; the cache parts are also reported on their own.
"""

from __future__ import annotations

import json
import re
from typing import Any, Unpack

import anthropic
import httpx2
from anthropic.types import JSONOutputFormatParam, RawMessageStreamEvent, ThinkingConfigParam

from drover.core.messages import Usage
from drover.core.model_stream import (
    BlockDelta,
    BlockStart,
    BlockStop,
    DeltaKind,
    ModelRequest,
    OutputSpec,
    StopReason,
    StreamEnd,
    StreamEvent,
    UsageUpdate,
)
from drover.providers.convert_anthropic import to_anthropic_messages, to_anthropic_tools
from drover.providers.retry import stream_error
from drover.providers.sdk_provider import SdkErrors, SdkOptions, SdkProvider, field, int_attr
from drover.providers.sdk_stream import ClosableStream, RawEvents
from drover.providers.sse import SseEvent
from drover.providers.wire_json import decode_event, encode_body

PROVIDER = "anthropic"
API = "the Anthropic API"
#: The API's 400 for a request over the context window: "prompt is too long: N tokens > M maximum".
_TOO_LONG = re.compile(r"prompt is too long", re.IGNORECASE)

_STOP_REASONS: dict[str, StopReason] = {
    "end_turn": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "stop_sequence": "stop_sequence",
    "pause_turn": "pause_turn",
    "refusal": "refusal",
    "model_context_window_exceeded": "max_tokens",
}

_DELTA_KINDS: dict[str, tuple[DeltaKind, str]] = {
    "text_delta": ("text", "text"),
    "thinking_delta": ("thinking", "thinking"),
    "signature_delta": ("signature", "signature"),
    "input_json_delta": ("input_json", "partial_json"),
}


class AnthropicEvents:
    """Maps one response's raw events onto neutral stream events (no I/O): the events as the
    API's JSON (dicts), or as the SDK's models."""

    def __init__(self) -> None:
        self._kinds: dict[int, str] = {}
        self._redacted: dict[int, str] = {}
        self._whole_input: dict[int, dict[str, Any]] = {}
        self._streamed_json: set[int] = set()
        self._counts = {"input": 0, "output": 0, "cache_read": 0, "cache_write": 0}
        self._stop_reason: str | None = None
        self._meta: dict[str, Any] = {"provider": PROVIDER}
        self._ended = False

    @property
    def usage(self) -> Usage:
        c = self._counts
        return Usage(
            input_tokens=c["input"] + c["cache_read"] + c["cache_write"],
            output_tokens=c["output"],
            cache_read_tokens=c["cache_read"],
            cache_write_tokens=c["cache_write"],
        )

    def _take_usage(self, raw: object) -> None:
        for key, name in (
            ("input", "input_tokens"),
            ("output", "output_tokens"),
            ("cache_read", "cache_read_input_tokens"),
            ("cache_write", "cache_creation_input_tokens"),
        ):
            value = int_attr(raw, name)
            if value is not None:
                self._counts[key] = value

    def feed(self, event: RawMessageStreamEvent) -> list[StreamEvent]:
        kind = field(event, "type", None)
        if kind == "message_start":
            message = field(event, "message", None)
            for name in ("id", "model"):
                value = field(message, name, None)
                if isinstance(value, str) and value:
                    self._meta["message_id" if name == "id" else name] = value
            self._take_usage(field(message, "usage", None))
            return [UsageUpdate(usage=self.usage)]
        if kind == "content_block_start":
            return self._block_start(event)
        if kind == "content_block_delta":
            return self._block_delta(event)
        if kind == "content_block_stop":
            return self._block_stop(event)
        if kind == "message_delta":
            reason = field(field(event, "delta", None), "stop_reason", None)
            if isinstance(reason, str) and reason:
                self._stop_reason = reason
            self._take_usage(field(event, "usage", None))
            return [UsageUpdate(usage=self.usage)]
        if kind == "message_stop":
            return self._end()
        return []  # ping is filtered by the SDK; unknown events are skipped

    def finish(self) -> list[StreamEvent]:
        """The SDK stream ran out: end the response, or fail if it was cut short."""
        if self._ended:
            return []
        if self._stop_reason is None:
            raise stream_error(
                "the Anthropic stream ended before the message was complete", "incomplete_stream"
            )
        return self._end()

    def _end(self) -> list[StreamEvent]:
        if self._ended:
            return []
        self._ended = True
        default: StopReason = "end_turn"
        if "tool_use" in self._kinds.values():
            default = "tool_use"
        reason = default if self._stop_reason is None else self._stop_reason
        stop = _STOP_REASONS.get(reason, "other")
        return [StreamEnd(stop_reason=stop, usage=self.usage, meta=dict(self._meta))]

    def _block_start(self, event: Any) -> list[StreamEvent]:
        index, block = field(event, "index", None), field(event, "content_block", None)
        kind = field(block, "type", None)
        if not isinstance(index, int):
            return []
        out: list[StreamEvent] = []
        if kind in ("text", "thinking"):
            self._kinds[index] = kind
            out.append(BlockStart(index=index, kind=kind))
            initial = field(block, kind, None)
            if isinstance(initial, str) and initial:
                out.append(BlockDelta(index=index, kind=kind, data=initial))
            signature = field(block, "signature", None) if kind == "thinking" else None
            if isinstance(signature, str) and signature:
                out.append(BlockDelta(index=index, kind="signature", data=signature))
        elif kind == "redacted_thinking":
            self._kinds[index] = kind
            self._redacted[index] = str(field(block, "data", "") or "")
            out.append(BlockStart(index=index, kind="thinking"))
        elif kind == "tool_use":
            self._kinds[index] = kind
            tool_id, name = field(block, "id", ""), field(block, "name", "")
            out.append(BlockStart(index=index, kind="tool_use", id=str(tool_id), name=str(name)))
            whole = field(block, "input", None)
            if isinstance(whole, dict) and whole:
                self._whole_input[index] = whole
        return out

    def _block_delta(self, event: Any) -> list[StreamEvent]:
        index, delta = field(event, "index", None), field(event, "delta", None)
        if not isinstance(index, int) or self._kinds.get(index) not in (
            "text",
            "thinking",
            "tool_use",
        ):
            return []
        mapped = _DELTA_KINDS.get(str(field(delta, "type", "")))
        if mapped is None:
            return []  # citations and delta kinds drover does not know
        kind, key = mapped
        data = field(delta, key, None)
        if not isinstance(data, str) or not data:
            return []
        if kind == "input_json":
            self._streamed_json.add(index)
        return [BlockDelta(index=index, kind=kind, data=data)]

    def _block_stop(self, event: Any) -> list[StreamEvent]:
        index = field(event, "index", None)
        if not isinstance(index, int) or index not in self._kinds:
            return []
        out: list[StreamEvent] = []
        if index in self._redacted:
            return [BlockStop(index=index, meta={"redacted_data": self._redacted.pop(index)})]
        whole = self._whole_input.pop(index, None)
        if whole is not None and index not in self._streamed_json:
            out.append(BlockDelta(index=index, kind="input_json", data=json.dumps(whole)))
        out.append(BlockStop(index=index))
        return out


def _interpret(sse: SseEvent, response: httpx2.Response) -> dict[str, Any] | None:
    """One server-sent event as the SDK's stream would take it: an ``error`` event raised as
    the SDK raises it (the status error of the 200 response, built from the event's body: the
    SDK has no subclass for a 200), ``ping``, unnamed and empty events skipped, any other
    event's JSON."""
    if not sse.event or sse.event == "ping":
        return None
    if sse.event == "error":
        body: object = sse.data
        try:
            body = decode_event(sse.data)
            message = f"{body}"
        except json.JSONDecodeError:
            message = sse.data or f"Error code: {response.status_code}"
        raise anthropic.APIStatusError(message, response=response, body=body)
    if not sse.data:
        return None
    event: dict[str, Any] = decode_event(sse.data)
    return event


def _classify(
    exc: Any, status: int | None, message: str, error_type: str | None, code: str | None
) -> tuple[str | None, bool]:
    kind = error_type or getattr(exc, "type", None)
    return kind, status in (400, 413) and bool(_TOO_LONG.search(message))


ERRORS = SdkErrors(
    sdk="Anthropic",
    key_var="ANTHROPIC_API_KEY",
    url_hint="The Anthropic SDK adds /v1/messages to it, so it usually has no path.",
    status_error=anthropic.APIStatusError,
    connection_error=anthropic.APIConnectionError,
    # The SDK raises an ``error`` event inside a 200 stream as a status error.
    stream_error=anthropic.APIStatusError,
    sdk_error=anthropic.AnthropicError,
    classify=_classify,
)


def anthropic_output_format(spec: OutputSpec) -> JSONOutputFormatParam:
    """``output_config.format`` for ``spec``: its schema as the SDK's ``transform_schema``
    adapts it (every object closed; bounds, defaults and other keywords the API does not
    take moved into descriptions)."""
    return {"type": "json_schema", "schema": anthropic.transform_schema(dict(spec.schema))}


class AnthropicProvider(SdkProvider[anthropic.AsyncAnthropic]):
    """``anthropic:MODEL``; ``thinking_budget`` turns extended thinking on with that budget."""

    provider = PROVIDER
    api = API
    errors = ERRORS
    aiohttp_client = anthropic.DefaultAioHttpClient

    def __init__(
        self,
        model: str,
        *,
        api_key: str,
        base_url: str | None = None,
        thinking_budget: int | None = None,
        **options: Unpack[SdkOptions],
    ) -> None:
        super().__init__(
            model, anthropic.AsyncAnthropic, api_key=api_key, base_url=base_url, **options
        )
        self._thinking_budget = thinking_budget

    async def _open(self, request: ModelRequest) -> tuple[ClosableStream[Any], AnthropicEvents]:
        max_tokens = self._max_output(request)
        thinking: ThinkingConfigParam | None = None
        if self._thinking_budget:
            thinking = {"type": "enabled", "budget_tokens": self._thinking_budget}
            max_tokens += self._thinking_budget
        # The parameters ``messages.create`` takes, in the order its body lists them.
        body: dict[str, Any] = {
            "max_tokens": max_tokens,
            "messages": to_anthropic_messages(request.messages),
            "model": self._model,
        }
        if request.output is not None:
            body["output_config"] = {"format": anthropic_output_format(request.output)}
        body["stream"] = True
        if request.system:
            body["system"] = request.system
        if thinking is not None:
            body["thinking"] = thinking
        if request.tools:
            body["tools"] = to_anthropic_tools(request.tools)
        stream = await self._guard(self._send(body))
        return RawEvents(stream, _interpret), AnthropicEvents()

    async def _send(self, body: dict[str, Any]) -> anthropic.AsyncStream[Any]:
        """POST ``body`` (``messages.create``'s parameters, streaming) as the SDK would.

        ``create`` first copies the whole body (the SDK's ``prepare_request_data``: every dict
        and list of the history, ~6 µs a message) and then encodes it; a body of plain JSON
        values comes out of that copy as it went in, so drover encodes it itself
        (:func:`~drover.providers.wire_json.encode_body`: the SDK's encoding, faster) and posts
        the bytes: the same request, byte for byte (``tests/providers/test_request_body.py``).
        A body the SDK's encoder refuses goes through ``create``, which handles it (or fails)
        its own way.
        """
        content = encode_body(body)
        if content is None:
            return await self._client.messages.create(**body)  # type: ignore[no-any-return]
        return await self._client.post(
            "/v1/messages",
            cast_to=anthropic.types.Message,
            content=content,
            stream=True,
            stream_cls=anthropic.AsyncStream[RawMessageStreamEvent],
        )
