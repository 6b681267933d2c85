"""``openai:MODEL`` — OpenAI Chat Completions (and compatible servers) through the ``openai`` SDK.

Streams with ``chat.completions.create(stream=True, stream_options={"include_usage": True})``.
:class:`ChatEvents` turns the chunks into neutral stream events. Blocks get indexes in the
order they first appear: reasoning, text, then one ``tool_use`` block per call.

* ``delta.content`` (and ``delta.refusal``) → a text block; ``reasoning_content`` or
  ``reasoning`` deltas (DeepSeek, vLLM, llama.cpp, Ollama, OpenRouter) → a thinking block.
* ``delta.tool_calls`` are assembled by their ``index``: id and name arrive once, arguments in
  fragments split anywhere — or whole. A call without an id gets a deterministic one (from the
  completion id and the call's position); an id repeated across calls is made unique
  (``call_x``, ``call_x_2``), so each call's result finds its call.
* ``finish_reason`` closes the blocks: ``tool_calls`` → ``tool_use``, ``stop`` → ``tool_use``
  when calls were streamed (some servers say ``stop`` anyway) else ``end_turn``, ``length`` →
  ``max_tokens``, ``content_filter`` → ``refusal``. The stream's end gives the
  :class:`StreamEnd`; without a usage chunk the usage is zero and marked partial.
* A chunk with an ``error`` key (raised as the SDK raises it) → :class:`StreamError`,
  retryable when its type or its code says the server failed: a gateway's ``"code": "500"``
  with no type is (:func:`~drover.providers.retry.stream_error`), OpenRouter's ``"code": 400``
  is not.

The stream is read from the response's bytes (:class:`~drover.providers.sdk_stream.RawEvents`:
drover decodes the events and each chunk's JSON itself, instead of the SDK's per-chunk models);
the SDK still builds the client, sends the request, retries and raises status errors.
* Error code ``context_length_exceeded`` (a 400, or an error chunk) →
  :class:`ContextOverflowError`; an error status whose body is not the API's JSON (a base URL
  without ``/v1``) names the URL it tried.

Usage: ``input_tokens`` is ``prompt_tokens`` (cached tokens included, as OpenAI counts them);
``cache_read_tokens`` is the cached part.

Structured output (``request.output``) is asked for with ``response_format`` ``json_schema``
(:mod:`drover.providers.output_format`).

The official API (no ``base_url``, or ``api.openai.com``) gets ``max_completion_tokens``, which
its reasoning models require; any other server gets ``max_tokens``, which every compatible
server understands.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any, Literal, TypeAlias, TypeVar, Unpack

import httpx2
import openai
from openai.types.chat import ChatCompletionChunk

from drover.core.messages import Usage
from drover.core.model_stream import (
    BlockDelta,
    BlockStart,
    BlockStop,
    ModelRequest,
    StopReason,
    StreamEnd,
    StreamEvent,
    UsageUpdate,
)
from drover.providers.convert_openai_chat import to_chat_messages, to_chat_tools
from drover.providers.ids import CHAT_IDS, synthetic_call_id, unique_id
from drover.providers.output_format import chat_response_format
from drover.providers.sdk_provider import (
    SdkErrors,
    SdkOptions,
    SdkProvider,
    as_str,
    field,
    int_attr,
    untransformed,
)
from drover.providers.sdk_stream import ClosableStream, RawEvents
from drover.providers.sse import SseEvent
from drover.providers.wire_json import decode_event, encode_body

PROVIDER = "openai"
API = "the OpenAI Chat Completions API"
#: The error code of a request over the model's context window (Chat and Responses).
CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"
_Streamed: TypeAlias = Literal["text", "thinking"]

_FINISH_REASONS: dict[str, StopReason] = {
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}


def _classify(
    exc: Any, status: int | None, message: str, error_type: str | None, code: str | None
) -> tuple[str | None, bool]:
    if code == CONTEXT_LENGTH_EXCEEDED:
        return code, True
    return (code or error_type) if status is not None else (error_type or code), False


#: The ``openai`` SDK's errors, for Chat Completions and Responses alike.
OPENAI_ERRORS = SdkErrors(
    sdk="OpenAI",
    key_var="OPENAI_API_KEY",
    url_hint="OpenAI-compatible servers usually end in /v1",
    status_error=openai.APIStatusError,
    connection_error=openai.APIConnectionError,
    # An error chunk or event inside a 200 stream.
    stream_error=openai.APIError,
    sdk_error=openai.OpenAIError,
    classify=_classify,
)


def openai_event(sse: SseEvent, response: httpx2.Response) -> dict[str, Any] | None:
    """One server-sent event of an ``openai`` SDK stream (a completion's chunk, or a Responses
    event) as the SDK's stream takes it: ``[DONE]`` ends the stream, data that is not JSON (or
    none) raises ``json``'s error, a payload with an ``error`` is raised as the SDK raises it
    (``APIError``), any other event is its JSON (None, skipped, when that is not an object).

    The event's name is not read: the SDK reads it only for the Assistants API's ``thread.*``
    events, which neither Chat Completions nor Responses send."""
    if sse.data.startswith("[DONE]"):
        raise StopAsyncIteration
    chunk = decode_event(sse.data)
    if isinstance(chunk, dict) and chunk.get("error"):
        error = chunk["error"]
        message = error.get("message") if isinstance(error, dict) else None
        if not message or not isinstance(message, str):
            message = "An error occurred during streaming"
        raise openai.APIError(message=message, request=response.request, body=error)
    # Anything but an object has no chunk's fields: the SDK's models read nothing from it.
    return chunk if isinstance(chunk, dict) else None


@dataclass(slots=True)
class _Call:
    raw_id: str = ""
    name: str = ""
    index: int | None = None
    closed: bool = False
    waiting: list[str] = dataclass_field(default_factory=list)


class ChatEvents:
    """Maps one completion's chunks onto neutral stream events (no I/O): the chunks as the
    API's JSON (dicts), or as the SDK's models."""

    def __init__(self) -> None:
        self._next_index = 0
        self._open: dict[_Streamed, int] = {}
        self._calls: dict[int, _Call] = {}
        self._ids: set[str] = set()
        self._last_call: int | None = None
        self._finish: str | None = None
        self._usage: Usage | None = None
        self._meta: dict[str, Any] = {"provider": PROVIDER}

    def feed(self, chunk: ChatCompletionChunk | dict[str, Any]) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        if "completion_id" not in self._meta and as_str(field(chunk, "id", None)):
            self._meta["completion_id"] = field(chunk, "id")
            self._meta["model"] = as_str(field(chunk, "model", None))
        for choice in field(chunk, "choices", None) or ():
            if field(choice, "index", 0) not in (0, None):
                continue  # drover asks for one choice
            delta = field(choice, "delta", None)
            if delta is not None:
                out += self._delta(delta)
            reason = field(choice, "finish_reason", None)
            if isinstance(reason, str) and reason:
                self._finish = reason
                out += self._close_all()
        usage = field(chunk, "usage", None)
        if usage is not None:
            self._usage = _usage(usage)
            out.append(UsageUpdate(usage=self._usage))
        return out

    def finish(self) -> list[StreamEvent]:
        """The stream ended ([DONE] or end of body): close what is open and end."""
        out = self._close_all()
        calls = bool(self._calls)
        reason = self._finish
        stop: StopReason
        if reason in _FINISH_REASONS:
            stop = _FINISH_REASONS[reason]
        elif calls:
            stop = "tool_use"
        else:
            stop = "end_turn" if reason in (None, "stop", "eos", "end_turn") else "other"
        usage = self._usage if self._usage is not None else Usage(partial=True)
        out.append(StreamEnd(stop_reason=stop, usage=usage, meta=dict(self._meta)))
        return out

    # -- deltas --------------------------------------------------------------------------------

    def _delta(self, delta: Any) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        for name in ("reasoning_content", "reasoning"):
            reasoning = field(delta, name, None)
            if isinstance(reasoning, str) and reasoning:
                out += self._append("thinking", reasoning)
                break
        for name in ("content", "refusal"):
            text = field(delta, name, None)
            if isinstance(text, str) and text:
                out += self._append("text", text)
        for call in field(delta, "tool_calls", None) or ():
            out += self._tool_delta(call)
        return out

    def _append(self, kind: _Streamed, data: str) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        index = self._open.get(kind)
        if index is None:
            index = self._open[kind] = self._take_index()
            out.append(BlockStart(index=index, kind=kind))
        out.append(BlockDelta(index=index, kind=kind, data=data))
        return out

    def _take_index(self) -> int:
        index = self._next_index
        self._next_index += 1
        return index

    def _tool_delta(self, fragment: Any) -> list[StreamEvent]:
        raw_id = as_str(field(fragment, "id", None))
        key = field(fragment, "index", None)
        if not isinstance(key, int):
            # Servers that leave out the index: a new id starts a new call.
            same = self._last_call is not None and (
                not raw_id or self._calls[self._last_call].raw_id == raw_id
            )
            key = self._last_call if same and self._last_call is not None else len(self._calls)
        self._last_call = key
        call = self._calls.setdefault(key, _Call())
        if raw_id and not call.raw_id:
            call.raw_id = raw_id
        function = field(fragment, "function", None)
        name = as_str(field(function, "name", None))
        if name and not call.name:
            call.name = name
        arguments = as_str(field(function, "arguments", None))
        out: list[StreamEvent] = []
        if call.closed:
            return out  # fragments after the finish reason have nowhere to go
        if call.index is None and call.name:
            out += self._start_call(key, call)
        if arguments:
            if call.index is None:
                call.waiting.append(arguments)
            else:
                out.append(BlockDelta(index=call.index, kind="input_json", data=arguments))
        return out

    def _start_call(self, key: int, call: _Call) -> list[StreamEvent]:
        # Text streamed before a call is finished: close it so it is kept as it stands.
        out = self._close("text") + self._close("thinking")
        call.index = self._take_index()
        seed = str(self._meta.get("completion_id", ""))
        tool_id = unique_id(call.raw_id or synthetic_call_id(seed, key), self._ids, CHAT_IDS)
        out.append(BlockStart(index=call.index, kind="tool_use", id=tool_id, name=call.name))
        if call.waiting:
            data = "".join(call.waiting)
            call.waiting.clear()
            out.append(BlockDelta(index=call.index, kind="input_json", data=data))
        return out

    def _close(self, kind: _Streamed) -> list[StreamEvent]:
        index = self._open.pop(kind, None)
        return [] if index is None else [BlockStop(index=index)]

    def _close_all(self) -> list[StreamEvent]:
        out = self._close("thinking") + self._close("text")
        for key in sorted(self._calls):
            call = self._calls[key]
            if call.closed:
                continue
            if call.index is None:
                out += self._start_call(key, call)
            if call.index is not None:
                out.append(BlockStop(index=call.index))
            call.closed = True
        return out


def _usage(raw: Any) -> Usage:
    def count(obj: Any, name: str) -> int:
        return int_attr(obj, name) or 0

    details = field(raw, "prompt_tokens_details", None)
    return Usage(
        input_tokens=count(raw, "prompt_tokens"),
        output_tokens=count(raw, "completion_tokens"),
        cache_read_tokens=count(details, "cached_tokens"),
    )


class OpenAIChatProvider(SdkProvider[openai.AsyncOpenAI]):
    """``openai:MODEL``, on the official API or any compatible server (``base_url``)."""

    provider = PROVIDER
    api = API
    errors = OPENAI_ERRORS
    aiohttp_client = openai.DefaultAioHttpClient

    def __init__(
        self,
        model: str,
        *,
        api_key: str,
        base_url: str | None = None,
        **options: Unpack[SdkOptions],
    ) -> None:
        super().__init__(model, openai.AsyncOpenAI, api_key=api_key, base_url=base_url, **options)
        self._official = base_url is None or "api.openai.com" in base_url

    async def _open(self, request: ModelRequest) -> tuple[ClosableStream[Any], ChatEvents]:
        max_tokens = self._max_output(request)
        messages = to_chat_messages(request.system, request.messages)
        tools = to_chat_tools(request.tools) if request.tools else None
        response_format = None if request.output is None else chat_response_format(request.output)
        # ``create``'s body for these parameters, in the order it lists them.
        body: dict[str, Any] = {"model": self._model, "stream": True, "messages": messages}
        body["max_completion_tokens" if self._official else "max_tokens"] = max_tokens
        if response_format is not None:
            body["response_format"] = response_format
        body["stream_options"] = {"include_usage": True}
        if tools is not None:
            body["tools"] = tools
        content = encode_body(body)
        if content is not None:
            opening = post_encoded(
                self._client,
                "/chat/completions",
                content,
                openai.types.chat.ChatCompletion,
                openai.AsyncStream[ChatCompletionChunk],
            )
            return RawEvents(await self._guard(opening), openai_event), ChatEvents()
        opening = self._client.chat.completions.create(
            model=self._model,
            messages=[],  # sent as given through ``extra_body`` (see ``untransformed``)
            extra_body=untransformed("messages", messages),
            tools=tools if tools is not None else openai.omit,
            response_format=response_format or openai.omit,
            stream=True,
            stream_options={"include_usage": True},
            max_completion_tokens=max_tokens if self._official else openai.omit,
            max_tokens=openai.omit if self._official else max_tokens,
        )
        return RawEvents(await self._guard(opening), openai_event), ChatEvents()


_Chunk = TypeVar("_Chunk")


def post_encoded(
    client: openai.AsyncOpenAI,
    path: str,
    content: bytes,
    cast_to: type[Any],
    stream_cls: type[openai.AsyncStream[_Chunk]],
) -> Awaitable[openai.AsyncStream[_Chunk]]:
    """POST ``content`` (a streaming ``create``'s body, encoded by
    :func:`~drover.providers.wire_json.encode_body`) to ``path`` as ``create`` would.

    ``create`` walks its parameters (``maybe_transform``, which changes nothing in drover's
    plain dicts: the history already goes past it in ``extra_body``) and then encodes the body
    with ``json`` (10–15 ms for a long session's 2.5 MB); drover encodes the same body faster
    and posts the bytes: the same request, headers included, the same JSON
    (``tests/providers/test_request_body.py``)."""
    return client.post(
        path,
        cast_to=cast_to,
        content=content,
        options={"security": {"bearer_auth": True}},
        stream=True,
        stream_cls=stream_cls,
    )
