"""An in-process scripted provider: real neutral stream events, no HTTP, no SDK.

The fake LLM server (:mod:`drover.testing.server`) tests drover through the real SDKs and wire
protocols. :class:`ScriptedProvider` is its in-process sibling for tests of everything above
the provider seam — the loop, the journal, the runner, your own tools and consumers — where a
socket only adds time and nondeterminism. Each request takes the next :class:`Reply` of the
script and streams it as a real provider would: ``UsageUpdate``, then each block's
``BlockStart`` / ``BlockDelta`` (text in ``chunk``-character pieces, tool input as JSON
fragments) / ``BlockStop``, then ``StreamEnd``. Failures go through the same retry code as the
real providers (:func:`drover.providers.retry.retrying`), so retry notices and the per-call
retry budget behave as in production::

    from drover.testing.scripted import Reply, ScriptedProvider, call

    provider = ScriptedProvider([
        Reply(text="Let me look.", calls=[call("read_file", path="a.txt")]),
        Reply(text="cut off mid-sent", fail_after=3),      # a retryable stream error
        Reply(error=ProviderHTTPError(529, "Overloaded")),  # fails before the stream starts
        Reply(text="Done."),
    ])
    session = AgentSession(provider=provider, tools=default_registry(), workdir=tmp_path)
    outcome = await session.run("read a.txt", EventRecorder())
    assert provider.requests[0].system == "..."   # every request is kept

``stall_after=N`` stops after N events until ``provider.release`` is set (or the task is
cancelled): the moment to interrupt a turn mid-stream. :func:`request_problems` checks a
history the way each of the three real APIs would (through drover's own converters and the
fake server's validators), so a test can prove that the next request is valid everywhere.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncGenerator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from drover.core.messages import Message, Usage
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
from drover.errors import ProviderError, StreamError
from drover.providers.retry import STARTED, RetryPolicy, Started, retrying


@dataclass(frozen=True, slots=True)
class ScriptedCall:
    """A tool call the scripted model makes; ``id`` defaults to ``call_<n>``."""

    name: str
    input: Mapping[str, Any]
    id: str | None = None


def call(name: str, id: str | None = None, **tool_input: Any) -> ScriptedCall:
    """``call("write_file", path="a", content="x")``."""
    return ScriptedCall(name=name, input=tool_input, id=id)


@dataclass(frozen=True, slots=True, kw_only=True)
class Reply:
    """One scripted model response (one request's worth)."""

    text: str = ""
    thinking: str = ""
    calls: Sequence[ScriptedCall] = ()
    #: Characters per text/thinking delta, and per tool-input JSON fragment.
    chunk: int = 8
    #: Raised before the stream starts (retried by the provider when it is retryable).
    error: ProviderError | None = None
    #: Raise a stream error after this many stream events.
    fail_after: int | None = None
    fail_retryable: bool = True
    #: Stop after this many events until :attr:`ScriptedProvider.release` is set.
    stall_after: int | None = None
    #: A response with no content at all.
    empty: bool = False
    stop_reason: StopReason | None = None
    input_tokens: int = 100
    output_tokens: int = 10


@dataclass(slots=True)
class ScriptedProvider:
    """A :class:`~drover.providers.base.Provider` that plays a script of replies."""

    replies: Iterable[Reply]
    name: str = "scripted"
    model: str = "scripted-model"
    #: Pre-stream retries when a request carries no retry budget.
    max_retries: int = 4
    #: Every request received, in order (one per attempt).
    requests: list[ModelRequest] = field(default_factory=list)
    #: Set to let stalled replies go on.
    release: asyncio.Event = field(default_factory=asyncio.Event)
    closed: bool = False
    _script: list[Reply] = field(default_factory=list, init=False)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1), init=False)

    def __post_init__(self) -> None:
        self._script = list(self.replies)

    @property
    def remaining(self) -> int:
        """Replies not yet used."""
        return len(self._script)

    def stream(self, request: ModelRequest) -> AsyncGenerator[StreamEvent, None]:
        policy = RetryPolicy(max_retries=self.max_retries, backoff_base=0.0, backoff_max=0.0)
        return retrying(
            policy, lambda: self._attempt(request), lambda exc: None, budget=request.retry_budget
        )

    async def aclose(self) -> None:
        self.closed = True

    async def _attempt(self, request: ModelRequest) -> AsyncGenerator[StreamEvent | Started, None]:
        self.requests.append(
            ModelRequest(
                system=request.system,
                messages=tuple(request.messages),
                tools=tuple(request.tools),
                max_tokens=request.max_tokens,
                output=request.output,
            )
        )
        if not self._script:
            raise ProviderError(f"the script has no reply left for request #{len(self.requests)}")
        reply = self._script.pop(0)
        if reply.error is not None:
            raise reply.error
        for count, event in enumerate(self._events(reply)):
            if count == reply.fail_after:
                raise StreamError(
                    "scripted stream error", error_type="api_error", retryable=reply.fail_retryable
                )
            if count == reply.stall_after:
                await self.release.wait()
            yield STARTED
            yield event
        await asyncio.sleep(0)

    def _events(self, reply: Reply) -> list[StreamEvent]:
        usage = Usage(input_tokens=reply.input_tokens)
        events: list[StreamEvent] = [UsageUpdate(usage=usage)]
        index = 0
        if not reply.empty:
            for kind, body in (("thinking", reply.thinking), ("text", reply.text)):
                if not body:
                    continue
                events.append(BlockStart(index=index, kind=kind))  # type: ignore[arg-type]
                events += [
                    BlockDelta(index=index, kind=kind, data=piece)  # type: ignore[arg-type]
                    for piece in _pieces(body, reply.chunk)
                ]
                if kind == "thinking":
                    events.append(BlockDelta(index=index, kind="signature", data="sig"))
                events.append(BlockStop(index=index))
                index += 1
            for scripted in reply.calls:
                call_id = scripted.id or f"call_{next(self._ids)}"
                events.append(
                    BlockStart(index=index, kind="tool_use", id=call_id, name=scripted.name)
                )
                raw = json.dumps(dict(scripted.input))
                events += [
                    BlockDelta(index=index, kind="input_json", data=piece)
                    for piece in _pieces(raw, reply.chunk)
                ]
                events.append(BlockStop(index=index))
                index += 1
        stop = reply.stop_reason or ("tool_use" if reply.calls else "end_turn")
        final = Usage(input_tokens=reply.input_tokens, output_tokens=reply.output_tokens)
        events.append(StreamEnd(stop_reason=stop, usage=final, meta={"provider": self.name}))
        return events


def _pieces(text: str, size: int) -> list[str]:
    size = max(1, size)
    return [text[i : i + size] for i in range(0, len(text), size)]


def request_problems(messages: Sequence[Message], system: str = "") -> dict[str, list[str]]:
    """What each real API would reject in a request made of ``messages``, per protocol
    (``anthropic``, ``openai``, ``openai-responses``); empty lists when all accept it."""
    from drover.providers.convert_anthropic import to_anthropic_messages
    from drover.providers.convert_openai_chat import to_chat_messages
    from drover.providers.convert_openai_responses import to_responses_input
    from drover.testing.validate import validate_anthropic, validate_chat, validate_responses

    anthropic_body = {"messages": to_anthropic_messages(messages)}
    chat_body = {"messages": to_chat_messages(system, messages)}
    items = to_responses_input(messages, stored=False)
    responses_body = {"input": items}
    return {
        "anthropic": validate_anthropic(anthropic_body),
        "openai": validate_chat(chat_body),
        "openai-responses": validate_responses(responses_body, items),
    }
