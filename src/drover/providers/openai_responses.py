"""``openai-responses:MODEL`` — the OpenAI Responses API through the official ``openai`` SDK.

Streams with ``responses.create(stream=True, input=[…], instructions=system, tools=[…])``.
:class:`ResponsesEvents` turns the events into neutral stream events, one block per output
item at its ``output_index``:

* a message item → a text block (``response.output_text.delta``; refusals too), meta
  ``{"provider": "openai-responses", "item_id": "msg_…"}``;
* a reasoning item → a thinking block of its summary (or reasoning text) deltas, whose meta
  carries the whole item (id, summary, ``encrypted_content``) so it goes back unchanged;
* a function call → a ``tool_use`` block with ``call_id`` as its id and the ``fc_…`` item id
  in meta, ``response.function_call_arguments.delta`` as ``input_json`` deltas;
* ``response.output_item.done`` → :class:`BlockStop` carrying the final item (text or
  arguments that were never streamed as deltas are passed on whole first);
* ``response.completed`` → :class:`StreamEnd` with the usage, stop reason ``tool_use`` when a
  function was called, else ``end_turn``; ``response.incomplete`` → ``max_tokens`` or
  ``refusal`` per ``incomplete_details.reason``; ``response.failed`` and ``error`` events
  (which the SDK hands over as ordinary events) → :class:`StreamError` — or
  :class:`ContextOverflowError` when their code is ``context_length_exceeded``, as is a 400
  with that code. A stream that stops before any of these was cut off: :class:`StreamError`.

The stream is read from the response's bytes (:class:`~drover.providers.sdk_stream.RawEvents`
with :func:`~drover.providers.openai_chat.openai_event`, as for Chat Completions: drover decodes
the events and each event's JSON itself, instead of the SDK's per-event models); the SDK still
builds the client, sends the request, retries and raises status errors. The mapper reads the
events as the API's JSON (dicts); an SDK model given to it is read as the JSON it was built
from.

Structured output (``request.output``) is asked for with ``text.format`` ``json_schema``
(:mod:`drover.providers.output_format`).

The message meta is ``{"provider": "openai-responses", "response_id": …, "input_digest": …}``.
While the server stores responses (``store`` not false, and no ``previous_response_id`` was
refused yet), a request that continues the last response sends only the new items with
``previous_response_id`` (see :func:`~drover.providers.convert_openai_responses.plan_input`).
A 400 about ``previous_response_id`` (or a 404 for a stored item id) is retried at once with
the whole input, and the provider then remembers, for its lifetime, that the server does not
store: no more chaining, no item ids, reasoning asked for with ``encrypted_content`` (and sent
back only with it). ``store=False`` does the same from the start, and so does ``chain=False``
(the config's ``chain = false``, ``--no-chain``) while leaving ``store`` to the server: for a
gateway that takes ``previous_response_id`` but loses what it refers to.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Unpack

import openai
from openai.types.responses import (
    ResponseIncludable,
    ResponseStreamEvent,
    ResponseTextConfigParam,
)
from openai.types.shared_params import Reasoning

from drover.core.messages import Usage
from drover.core.model_stream import (
    BlockDelta,
    BlockKind,
    BlockStart,
    BlockStop,
    ModelRequest,
    StopReason,
    StreamEnd,
    StreamEvent,
)
from drover.errors import ProviderError
from drover.providers.convert_openai_responses import (
    PROVIDER,
    InputPlan,
    plan_input,
    to_responses_tools,
)
from drover.providers.openai_chat import (
    CONTEXT_LENGTH_EXCEEDED,
    OPENAI_ERRORS,
    openai_event,
    post_encoded,
)
from drover.providers.output_format import responses_text_format
from drover.providers.retry import context_overflow, error_code, stream_error
from drover.providers.sdk_provider import (
    SdkOptions,
    SdkProvider,
    as_str,
    field,
    int_attr,
    untransformed,
)
from drover.providers.sdk_stream import RawEvents
from drover.providers.wire_json import encode_body

API = "the OpenAI Responses API"
ReasoningEffort = Literal["minimal", "low", "medium", "high"]

_INCOMPLETE: dict[str, StopReason] = {
    "max_output_tokens": "max_tokens",
    "content_filter": "refusal",
}


def _dump(item: Any) -> dict[str, Any]:
    """An output item (or an event) as the plain JSON the server sent (an item is stored, then
    sent back): the decoded JSON itself, or the JSON an SDK model was built from."""
    if type(item) is dict:
        return item
    to_dict = getattr(item, "to_dict", None)
    dumped = to_dict(mode="json", warnings=False) if callable(to_dict) else None
    return dict(dumped) if isinstance(dumped, dict) else {}


def _item_text(item: Any) -> str:
    """The text of a message item, or of a reasoning item's summary (or content)."""
    parts: list[str] = []
    if field(item, "type") == "reasoning":
        for part in field(item, "summary") or field(item, "content") or ():
            parts.append(as_str(field(part, "text")))
        return "\n\n".join(p for p in parts if p)
    for part in field(item, "content") or ():
        parts.append(as_str(field(part, "text")) or as_str(field(part, "refusal")))
    return "".join(parts)


@dataclass(slots=True)
class _Item:
    kind: BlockKind
    streamed: bool = False
    summary_index: int = 0
    done: bool = False


_KINDS: dict[str, BlockKind] = {
    "message": "text",
    "reasoning": "thinking",
    "function_call": "tool_use",
}
_DELTAS: dict[str, BlockKind] = {
    "response.output_text.delta": "text",
    "response.refusal.delta": "text",
    "response.reasoning_summary_text.delta": "thinking",
    "response.reasoning_text.delta": "thinking",
    "response.function_call_arguments.delta": "tool_use",
}


class ResponsesEvents:
    """Maps one response's events (the API's JSON) onto neutral stream events (no I/O)."""

    def __init__(self, input_digest: str | Callable[[], str] | None = None) -> None:
        """``input_digest`` (or the function that computes it, called once the response has
        ended) goes in the message meta."""
        self._items: dict[int, _Item] = {}
        self._meta: dict[str, Any] = {"provider": PROVIDER}
        self._digest = input_digest
        self._ended = False

    def feed(self, event: dict[str, Any] | ResponseStreamEvent) -> list[StreamEvent]:
        data = _dump(event)
        kind = as_str(data.get("type"))
        index = data.get("output_index")
        # Deltas first: they are nearly every event of a response.
        if kind in _DELTAS and isinstance(index, int):
            return self._delta(index, kind, data)
        if kind in ("response.created", "response.in_progress", "response.queued"):
            self._remember_id(data.get("response"))
            return []
        if kind == "response.output_item.added" and isinstance(index, int):
            return self._added(index, data.get("item"))
        if kind == "response.function_call_arguments.done" and isinstance(index, int):
            return self._whole(index, as_str(data.get("arguments")))
        if kind == "response.output_item.done" and isinstance(index, int):
            return self._done(index, data.get("item"))
        if kind in ("response.completed", "response.incomplete"):
            return self._end(data.get("response"))
        if kind == "response.failed":
            error = field(data.get("response"), "error")
            message = as_str(field(error, "message")) or "the response failed"
            raise _failure(message, error_code(field(error, "code")) or "failed")
        if kind == "error":
            message = as_str(data.get("message")) or "the stream reported an error"
            raise _failure(message, error_code(data.get("code")))
        return []

    def finish(self) -> list[StreamEvent]:
        if not self._ended:
            raise stream_error(
                "the Responses stream ended before the response completed", "incomplete_stream"
            )
        return []

    def _remember_id(self, response: Any) -> None:
        response_id = as_str(field(response, "id"))
        if response_id:
            self._meta["response_id"] = response_id

    def _added(self, index: int, item: Any) -> list[StreamEvent]:
        kind = _KINDS.get(as_str(field(item, "type")))
        if kind is None or index in self._items:
            return []  # built-in tools and other items drover does not act on
        self._items[index] = _Item(kind)
        meta: dict[str, Any] = {"provider": PROVIDER}
        if kind == "thinking":
            meta["item"] = _dump(item)
        else:
            meta["item_id"] = as_str(field(item, "id"))
        if kind != "tool_use":
            return [BlockStart(index=index, kind=kind, meta=meta)]
        start = BlockStart(
            index=index,
            kind="tool_use",
            id=as_str(field(item, "call_id")),
            name=as_str(field(item, "name")),
            meta=meta,
        )
        return [start, *self._whole(index, as_str(field(item, "arguments")))]

    def _delta(self, index: int, kind: str, event: dict[str, Any]) -> list[StreamEvent]:
        item = self._items.get(index)
        data = as_str(event.get("delta"))
        if item is None or item.done or item.kind != _DELTAS[kind] or not data:
            return []
        if item.kind == "thinking":
            part = event.get("summary_index")
            if isinstance(part, int) and part != item.summary_index:
                item.summary_index = part
                if item.streamed:
                    data = "\n\n" + data
        item.streamed = True
        delta_kind: Literal["text", "thinking", "input_json"] = (
            "input_json" if item.kind == "tool_use" else item.kind
        )
        return [BlockDelta(index=index, kind=delta_kind, data=data)]

    def _whole(self, index: int, data: str) -> list[StreamEvent]:
        """Content that arrived whole rather than as deltas (passed on once)."""
        item = self._items.get(index)
        if item is None or item.done or item.streamed or not data:
            return []
        item.streamed = True
        kind: Literal["text", "thinking", "input_json"] = (
            "input_json" if item.kind == "tool_use" else item.kind
        )
        return [BlockDelta(index=index, kind=kind, data=data)]

    def _done(self, index: int, item: Any) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        if index not in self._items:
            out += self._added(index, item)
        state = self._items.get(index)
        if state is None or state.done:
            return out
        if state.kind == "tool_use":
            out += self._whole(index, as_str(field(item, "arguments")))
            meta: dict[str, Any] = {"item_id": as_str(field(item, "id"))}
        else:
            out += self._whole(index, _item_text(item))
            meta = {"item": _dump(item)} if state.kind == "thinking" else {}
        state.done = True
        out.append(BlockStop(index=index, meta=meta))
        return out

    def _end(self, response: Any) -> list[StreamEvent]:
        self._remember_id(response)
        out: list[StreamEvent] = []
        for index, item in sorted(self._items.items()):
            if not item.done:
                item.done = True
                out.append(BlockStop(index=index))
        called = any(item.kind == "tool_use" for item in self._items.values()) or any(
            field(entry, "type") == "function_call" for entry in field(response, "output") or ()
        )
        stop: StopReason = "tool_use" if called else "end_turn"
        if field(response, "status") == "incomplete":
            details = field(response, "incomplete_details")
            stop = _INCOMPLETE.get(as_str(field(details, "reason")), "other")
        self._ended = True
        usage = _usage(field(response, "usage"))
        meta = dict(self._meta)
        if self._digest is not None:
            meta["input_digest"] = self._digest if isinstance(self._digest, str) else self._digest()
        out.append(StreamEnd(stop_reason=stop, usage=usage, meta=meta))
        return out


def _failure(message: str, code: str | None) -> ProviderError:
    if code == CONTEXT_LENGTH_EXCEEDED:
        return context_overflow(message, error_type=code)
    return stream_error(message, code)


def _usage(raw: Any) -> Usage:
    def count(obj: Any, name: str) -> int:
        return int_attr(obj, name) or 0

    if raw is None:
        return Usage(partial=True)
    details = field(raw, "input_tokens_details")
    return Usage(
        input_tokens=count(raw, "input_tokens"),
        output_tokens=count(raw, "output_tokens"),
        cache_read_tokens=count(details, "cached_tokens"),
        cache_write_tokens=count(details, "cache_write_tokens"),
    )


def refuses_stored_state(exc: openai.APIStatusError) -> bool:
    """A 400/404 saying stored state is unavailable: an unknown ``previous_response_id``, or
    an input item id the server does not have (``Item with id 'rs_…' not found``)."""
    if exc.status_code not in (400, 404):
        return False
    body = exc.body if isinstance(exc.body, dict) else {}
    fields = [exc.code, exc.param, body.get("code"), body.get("param"), body.get("message")]
    texts = [f for f in (*fields, exc.message) if isinstance(f, str)]
    if any("previous_response" in text for text in texts):
        return True
    return any("Item with id" in text and "not found" in text for text in texts)


class OpenAIResponsesProvider(SdkProvider[openai.AsyncOpenAI]):
    """``openai-responses:MODEL``.

    ``store`` is sent as given (None: the server's default, which stores); ``chain=False``
    sends the whole history every time (see the module docstring); ``reasoning_effort`` asks
    reasoning models for that effort and a reasoning summary.
    """

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
        store: bool | None = None,
        chain: bool = True,
        reasoning_effort: ReasoningEffort | None = None,
        **options: Unpack[SdkOptions],
    ) -> None:
        super().__init__(model, openai.AsyncOpenAI, api_key=api_key, base_url=base_url, **options)
        self._store = store
        self._reasoning_effort = reasoning_effort
        #: False once the server refused a previous_response_id (or store=False, chain=False).
        self._server_stores = store is not False and chain

    @property
    def server_stores(self) -> bool:
        """Whether requests may continue stored responses with ``previous_response_id``."""
        return self._server_stores

    async def _open(self, request: ModelRequest) -> tuple[RawEvents, ResponsesEvents]:
        plan = plan_input(request.messages, stored=self._server_stores)
        try:
            sdk_stream = await self._create(request, plan)
        except openai.APIStatusError as exc:
            if not self._server_stores or not refuses_stored_state(exc):
                raise
            self._server_stores = False  # for good: this server keeps nothing we can use
            plan = plan_input(request.messages, stored=False)
            sdk_stream = await self._create(request, plan)
        # The digest is read once the response has ended, not before the request goes out.
        digest = (lambda: plan.digest) if self._server_stores else None
        return RawEvents(sdk_stream, openai_event), ResponsesEvents(digest)

    async def _create(
        self, request: ModelRequest, plan: InputPlan
    ) -> openai.AsyncStream[ResponseStreamEvent]:
        include: list[ResponseIncludable] | openai.Omit = openai.omit
        if not self._server_stores:
            include = ["reasoning.encrypted_content"]
        reasoning: Reasoning | openai.Omit = openai.omit
        if self._reasoning_effort is not None:
            reasoning = {"effort": self._reasoning_effort, "summary": "auto"}
        tools = to_responses_tools(request.tools) if request.tools else openai.omit
        text: ResponseTextConfigParam | openai.Omit = openai.omit
        if request.output is not None:
            text = {"format": responses_text_format(request.output)}
        max_output = self._max_output(request)
        # ``create``'s body for these parameters, in the order it lists them.
        given: dict[str, Any] = {
            "model": self._model,
            "stream": True,
            "include": include,
            "input": plan.items,
            "instructions": request.system or openai.omit,
            "max_output_tokens": max_output,
            "previous_response_id": plan.previous_response_id or openai.omit,
            "reasoning": reasoning,
            "store": openai.omit if self._store is None else self._store,
            "text": text,
            "tools": tools,
        }
        content = encode_body({k: v for k, v in given.items() if v is not openai.omit})
        if content is not None:
            return await self._guard(
                post_encoded(
                    self._client,
                    "/responses",
                    content,
                    openai.types.responses.Response,
                    openai.AsyncStream[ResponseStreamEvent],
                )
            )
        opening = self._client.responses.create(
            model=self._model,
            input=[],  # sent as given through ``extra_body`` (see ``untransformed``)
            extra_body=untransformed("input", plan.items),
            instructions=request.system or openai.omit,
            tools=tools,
            previous_response_id=plan.previous_response_id or openai.omit,
            store=openai.omit if self._store is None else self._store,
            include=include,
            reasoning=reasoning,
            max_output_tokens=max_output,
            text=text,
            stream=True,
        )
        return await self._guard(opening)
