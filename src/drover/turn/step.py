"""One model call of a turn while it is in progress (:class:`Step`): the live events of its
stream, and what is kept of it when the turn ends abnormally.

A step moves through three phases: ``streaming`` (the response is arriving), ``kept`` (the
response joined the turn's work and its tool calls have not started) and ``tools`` (its tool
batch runs). What the loop records when the turn ends abnormally depends only on how far the
current step got:

==================================  ==========================================================
no step in progress                 nothing: everything the turn made is already in its work
streaming                           the partial message; calls announced but not finished are
                                    closed as never run
message kept, tools not started     one "never ran" result per call
tools running                       the batch's results: real outputs of finished calls, an
                                    interrupted result for the others
==================================  ==========================================================

The loop drops a step the moment its last message (the response without calls, or the tool
results) joins the turn's work, so nothing is ever recorded twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from drover.core.accumulate import Accumulator
from drover.core.events import (
    NOT_RUN_TEXT,
    AssistantMessage,
    TextDelta,
    ThinkingDelta,
    ToolResults,
    ToolStateChanged,
)
from drover.core.messages import (
    ContentBlock,
    Message,
    ToolResultBlock,
    ToolUseBlock,
    tool_result_message,
)
from drover.core.model_stream import BlockDelta, BlockStart, BlockStop, StreamEvent
from drover.core.sinks import EventSink
from drover.turn.tool_batch import ToolBatch

Phase = Literal["streaming", "kept", "tools"]


@dataclass(slots=True)
class Step:
    """The model call in progress, for the cleanup of an abnormal end (see the module doc)."""

    acc: Accumulator = field(default_factory=Accumulator)
    phase: Phase = "streaming"
    #: tool_use blocks announced during the stream: id → (call index, name).
    announced: dict[str, tuple[int, str]] = field(default_factory=dict)
    message: Message | None = None
    batch: ToolBatch | None = None
    #: Whether the usage of the current attempt was already added to the turn's totals.
    usage_counted: bool = False
    #: Whether the current attempt's use so far went out as it began (the loop's
    #: ``_report_start``).
    usage_started: bool = False

    async def announce(
        self, sink: EventSink, event: StreamEvent, finished: ContentBlock | None
    ) -> None:
        """Turn stream progress into live events."""
        if isinstance(event, BlockDelta):
            if event.kind == "text":
                await sink.send(TextDelta(text=event.data, index=event.index))
            elif event.kind == "thinking":
                await sink.send(ThinkingDelta(text=event.data, index=event.index))
        elif isinstance(event, BlockStart) and event.kind == "tool_use":
            index = len(self.announced)
            self.announced[event.id] = (index, event.name)
            await sink.send(
                ToolStateChanged(
                    call_id=event.id, call_index=index, name=event.name, state="input-streaming"
                )
            )
        elif (
            isinstance(event, BlockStop)
            and isinstance(finished, ToolUseBlock)
            and finished.id in self.announced
        ):
            index, name = self.announced[finished.id]
            await sink.send(
                ToolStateChanged(
                    call_id=finished.id,
                    call_index=index,
                    name=name,
                    state="input-available",
                    input=finished.input,
                )
            )

    async def restart(self, sink: EventSink) -> None:
        """Forget a failed attempt of the step: its announced calls never ran."""
        await self.interrupt_announced(sink)
        self.acc, self.announced, self.usage_counted = Accumulator(), {}, False
        self.usage_started = False

    async def interrupt_announced(self, sink: EventSink) -> None:
        """Tool calls seen in a stream that broke never ran: close their states."""
        announced, self.announced = self.announced, {}
        for call_id, (index, name) in announced.items():
            await send_not_run(sink, call_id, index, name)

    async def salvage(self, sink: EventSink, messages: list[Message]) -> None:
        """Keep in ``messages`` (the turn's work) what the broken step produced, according to
        how far it got (module doc)."""
        if self.phase == "tools" and self.batch is not None:
            batch = self.batch
            message = tool_result_message(batch.results())
            messages.append(message)
            await batch.close_unreported()
            await sink.send(ToolResults(message=message))
            return
        if self.phase in ("kept", "tools") and self.message is not None:
            calls = self.message.tool_uses
            message = _not_run_results(calls)
            messages.append(message)
            for index, call in enumerate(calls):
                await send_not_run(sink, call.id, index, call.name)
            await sink.send(ToolResults(message=message))
            return
        partial = self.acc.partial_message()
        finished_calls = partial.tool_uses if partial else ()
        indexes = {call_id: index for call_id, (index, _) in self.announced.items()}
        kept = {call.id for call in finished_calls}
        self.announced = {k: v for k, v in self.announced.items() if k not in kept}
        results: Message | None = None
        if partial is not None:
            messages.append(partial)
            if finished_calls:
                # Calls whose input was complete: recorded, never run.
                results = _not_run_results(finished_calls)
                messages.append(results)
        await self.interrupt_announced(sink)
        if partial is None:
            return
        await sink.send(AssistantMessage(message=partial, partial=True))
        for position, call in enumerate(finished_calls):
            await send_not_run(sink, call.id, indexes.get(call.id, position), call.name)
        if results is not None:
            await sink.send(ToolResults(message=results))


async def send_not_run(sink: EventSink, call_id: str, index: int, name: str) -> None:
    """Close a call's state as never run."""
    await sink.send(
        ToolStateChanged(
            call_id=call_id,
            call_index=index,
            name=name,
            state="interrupted",
            output=NOT_RUN_TEXT,
            is_error=True,
        )
    )


def _not_run_results(calls: tuple[ToolUseBlock, ...]) -> Message:
    """The results message of calls that never ran."""
    return tool_result_message(
        [ToolResultBlock(tool_use_id=c.id, content=NOT_RUN_TEXT, is_error=True) for c in calls]
    )
