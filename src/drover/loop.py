"""The agent loop: one turn of stream → accumulate → run tools → repeat.

A turn works on a :class:`TurnWork`: the messages placed before it (pending work of earlier
unfinished turns and the user's message) and everything the turn adds — assistant messages,
tool results, and on failure the partial message of the step that broke. The caller keeps a
reference to it, so the work survives whatever ends the turn.

Every turn ends with exactly one terminal event (see :mod:`drover.events`):

* ``Done`` — the model answered without tool calls; the caller commits the work;
* ``Incomplete`` — an abnormal end after the turn accumulated work: an API or stream error,
  an empty response, the turn limit, or an interruption; the work stays pending;
* ``Error`` — an abnormal end before the turn accumulated anything.

Interruption is task cancellation: the loop records the partial message or the tool batch's
interrupted results, emits the terminal event, then lets the cancellation propagate.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from pathlib import Path

from drover.accumulate import Accumulator
from drover.channel import EventSink
from drover.compact import compact_history
from drover.convo import ConversationManager
from drover.errors import EmptyResponseError, ProviderError, StreamError
from drover.events import (
    AssistantMessage,
    Done,
    EndReason,
    Error,
    Incomplete,
    Retry,
    StepStarted,
    TerminalEvent,
    TextDelta,
    ThinkingDelta,
    ToolResults,
    ToolStateChanged,
    UsageReport,
)
from drover.messages import (
    ContentBlock,
    Message,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    tool_result_message,
)
from drover.permissions import PermissionPolicy
from drover.providers.base import Provider
from drover.streaming import BlockDelta, BlockStart, BlockStop, ModelRequest, StreamEvent
from drover.streaming import RetryNotice as ProviderRetry
from drover.toolrun import NOT_RUN_TEXT, ToolBatch
from drover.tools.registry import ToolRegistry


@dataclass(frozen=True, slots=True, kw_only=True)
class LoopSettings:
    #: Model calls allowed in one turn; reaching it is a resumable pause.
    max_turns: int = 25
    #: New attempts of a step whose stream failed part-way (provider retries come first).
    stream_retries: int = 2
    stream_retry_delay: float = 1.0
    max_tokens: int = 8192
    #: Messages kept verbatim when the history is compacted.
    keep_tail: int = 8
    compaction: bool = True


@dataclass(slots=True)
class TurnWork:
    """The messages of one turn: ``messages[:start]`` came before it, the rest it produced."""

    messages: list[Message]
    start: int
    usage: Usage = field(default_factory=Usage)
    outcome: TerminalEvent | None = None

    @classmethod
    def begin(cls, prefix: list[Message]) -> TurnWork:
        return cls(messages=list(prefix), start=len(prefix))

    @property
    def added(self) -> list[Message]:
        return self.messages[self.start :]

    @property
    def accumulated(self) -> bool:
        return len(self.messages) > self.start


@dataclass(slots=True)
class _Step:
    """The state of the model call in progress, for the cleanup of an abnormal end."""

    acc: Accumulator = field(default_factory=Accumulator)
    #: tool_use blocks announced during the stream: id → (call index, name).
    announced: dict[str, tuple[int, str]] = field(default_factory=dict)
    batch: ToolBatch | None = None
    #: Whether the usage of the current attempt was already added to the turn's totals.
    usage_counted: bool = False


class AgentLoop:
    def __init__(
        self,
        *,
        provider: Provider,
        convo: ConversationManager,
        tools: ToolRegistry,
        policy: PermissionPolicy,
        sink: EventSink,
        workdir: Path,
        settings: LoopSettings | None = None,
    ) -> None:
        self.provider = provider
        self.convo = convo
        self.tools = tools
        self.policy = policy
        self.sink = sink
        self.workdir = workdir
        self.settings = settings or LoopSettings()

    async def run_turn(self, work: TurnWork) -> TerminalEvent:
        """Run the turn to its terminal event (also stored in ``work.outcome``)."""
        step = _Step()
        try:
            outcome = await self._run(work, step)
        except asyncio.CancelledError:
            self._count_partial_usage(work, step)
            await self._salvage(work, step)
            await self._end(work, "interrupted", "interrupted by the user")
            raise
        return outcome

    # -- the loop ------------------------------------------------------------------------------

    async def _run(self, work: TurnWork, step: _Step) -> TerminalEvent:
        calls = 0
        while True:
            if calls >= self.settings.max_turns:
                return await self._end(
                    work, "max_turns", f"turn limit reached ({self.settings.max_turns} model calls)"
                )
            calls += 1
            await self.sink.send(StepStarted(step=calls))
            if self.settings.compaction and self.convo.needs_compaction(work.messages):
                await compact_history(self.provider, self.convo, self.settings.keep_tail, self.sink)

            step.acc, step.announced, step.batch = Accumulator(), {}, None
            step.usage_counted = False
            try:
                message = await self._stream_with_retries(work, step)
            except ProviderError as exc:
                await self._salvage(work, step)
                reason: EndReason = (
                    "empty_response" if isinstance(exc, EmptyResponseError) else "error"
                )
                return await self._end(work, reason, str(exc))

            work.messages.append(message)
            await self.sink.send(AssistantMessage(message=message))
            calls_made = message.tool_uses
            if not calls_made:
                work.outcome = Done(text=message.text, usage=work.usage)
                await self.sink.send(work.outcome)
                return work.outcome

            step.batch = ToolBatch(
                calls_made,
                tools=self.tools,
                policy=self.policy,
                sink=self.sink,
                workdir=self.workdir,
            )
            results = await step.batch.run()
            step.batch = None
            await self._add_results(work, results)

    async def _stream_with_retries(self, work: TurnWork, step: _Step) -> Message:
        attempt = 0
        while True:
            try:
                return await self._stream_once(work, step)
            except ProviderError as exc:
                self._count_partial_usage(work, step)
                # Failures before the stream began were already retried by the provider.
                retry = isinstance(exc, StreamError) and exc.retryable
                if not retry or attempt >= self.settings.stream_retries:
                    raise
                attempt += 1
                shown = step.acc.has_content
                await self._interrupt_announced(step)
                step.acc, step.announced, step.usage_counted = Accumulator(), {}, False
                delay = self.settings.stream_retry_delay * (2 ** (attempt - 1))
                await self.sink.send(
                    Retry(attempt=attempt, delay=delay, error=str(exc), discard_partial=shown)
                )
                await asyncio.sleep(delay)

    async def _stream_once(self, work: TurnWork, step: _Step) -> Message:
        request = ModelRequest(
            system=self.convo.system_prompt,
            messages=[*self.convo.messages(), *work.messages],
            tools=self.tools.specs(),
            max_tokens=self.settings.max_tokens,
        )
        estimate = self.convo.estimate(request.messages)
        acc = step.acc
        async with contextlib.aclosing(self.provider.stream(request)) as events:
            async for event in events:
                if isinstance(event, ProviderRetry):
                    await self.sink.send(
                        Retry(attempt=event.attempt, delay=event.delay, error=event.error)
                    )
                    continue
                finished = acc.apply(event)
                await self._announce(step, event, finished)
        usage = acc.usage
        work.usage = work.usage + usage
        step.usage_counted = True
        self.convo.record_usage(estimate, usage.input_tokens)
        await self.sink.send(
            UsageReport(
                usage=usage,
                total_input=work.usage.input_tokens,
                total_output=work.usage.output_tokens,
            )
        )
        message = acc.message()
        if not message.content:
            raise EmptyResponseError()
        return message

    async def _announce(
        self, step: _Step, event: StreamEvent, finished: ContentBlock | None
    ) -> None:
        """Turn stream progress into live events."""
        if isinstance(event, BlockDelta):
            if event.kind == "text":
                await self.sink.send(TextDelta(text=event.data, index=event.index))
            elif event.kind == "thinking":
                await self.sink.send(ThinkingDelta(text=event.data, index=event.index))
        elif isinstance(event, BlockStart) and event.kind == "tool_use":
            index = len(step.announced)
            step.announced[event.id] = (index, event.name)
            await self.sink.send(
                ToolStateChanged(
                    call_id=event.id, call_index=index, name=event.name, state="input-streaming"
                )
            )
        elif (
            isinstance(event, BlockStop)
            and isinstance(finished, ToolUseBlock)
            and finished.id in step.announced
        ):
            index, name = step.announced[finished.id]
            await self.sink.send(
                ToolStateChanged(
                    call_id=finished.id,
                    call_index=index,
                    name=name,
                    state="input-available",
                    input=finished.input,
                )
            )

    # -- abnormal ends -------------------------------------------------------------------------

    @staticmethod
    def _count_partial_usage(work: TurnWork, step: _Step) -> None:
        """Usage of a cut-off stream counts as far as it is known, marked partial."""
        if step.usage_counted:
            return
        step.usage_counted = True
        work.usage = work.usage + step.acc.usage.as_partial()

    async def _interrupt_announced(self, step: _Step) -> None:
        """Tool calls seen in a stream that broke never ran: close their states."""
        for call_id, (index, name) in step.announced.items():
            await self.sink.send(
                ToolStateChanged(
                    call_id=call_id,
                    call_index=index,
                    name=name,
                    state="interrupted",
                    output=NOT_RUN_TEXT,
                    is_error=True,
                )
            )
        step.announced = {}

    async def _salvage(self, work: TurnWork, step: _Step) -> None:
        """Keep what the broken step produced: the partial message or the tool results."""
        if step.batch is not None:
            batch, step.batch = step.batch, None
            await self._add_results(work, batch.results())
            return
        partial = step.acc.partial_message()
        finished_calls = partial.tool_uses if partial else ()
        kept = {call.id for call in finished_calls}
        unfinished = {k: v for k, v in step.announced.items() if k not in kept}
        step.announced = unfinished
        await self._interrupt_announced(step)
        if partial is None:
            return
        work.messages.append(partial)
        await self.sink.send(AssistantMessage(message=partial, partial=True))
        if finished_calls:
            for call in finished_calls:
                index = next(i for i, c in enumerate(finished_calls) if c.id == call.id)
                await self.sink.send(
                    ToolStateChanged(
                        call_id=call.id,
                        call_index=index,
                        name=call.name,
                        state="interrupted",
                        output=NOT_RUN_TEXT,
                        is_error=True,
                    )
                )
            await self._add_results(
                work,
                [
                    ToolResultBlock(tool_use_id=c.id, content=NOT_RUN_TEXT, is_error=True)
                    for c in finished_calls
                ],
            )

    async def _add_results(self, work: TurnWork, results: list[ToolResultBlock]) -> None:
        message = tool_result_message(results)
        work.messages.append(message)
        await self.sink.send(ToolResults(message=message))

    async def _end(self, work: TurnWork, reason: EndReason, error: str) -> TerminalEvent:
        outcome: TerminalEvent
        if work.accumulated:
            outcome = Incomplete(reason=reason, error=error, usage=work.usage)
        else:
            outcome = Error(reason=reason, error=error, usage=work.usage)
        work.outcome = outcome
        await self.sink.send(outcome)
        return outcome
