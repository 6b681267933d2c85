"""The agent loop: one turn of stream → accumulate → run tools → repeat.

A turn works on a :class:`TurnWork`: the messages placed before it (pending work of earlier
unfinished turns and the user's message) and everything the turn adds — assistant messages,
tool results, and on failure the partial message of the step that broke. The caller keeps a
reference to it, so the work survives whatever ends the turn.

Every turn ends with exactly one terminal event (see :mod:`drover.core.events`):

* ``Done`` — the model answered without tool calls; the caller commits the work;
* ``Incomplete`` — an abnormal end after the turn accumulated work: an API or stream error,
  an empty response, the turn limit, or an interruption; the work stays pending;
* ``Error`` — an abnormal end before the turn accumulated anything.

Interruption is task cancellation, and it may arrive at any await — while the model streams,
while a tool runs or waits for permission, or while a consumer handles any event. What the
loop records then depends only on how far the current model call (its
:class:`~drover.turn.step.Step`) got: see :mod:`drover.turn.step`, which keeps what a broken
step produced. The loop then emits the terminal event and lets the cancellation propagate —
unless the turn was stopped through :class:`TurnControl` (the journal failed, the lease was
lost), in which case the turn ends with that reason and returns normally.

A turn's caller may give it :class:`TurnOptions`: ``deps`` every tool call sees as
``ctx.deps`` (the ``task`` tool's workers too), and an ``output`` schema the final answer must
match (structured output). An answer that does not match gets one corrective follow-up
message within the turn, recorded like any other; a second invalid answer ends the turn
``Incomplete`` with reason ``invalid_output``. A valid one ends it with ``Done``, its text the
JSON and its ``output`` the validated model instance.

Two seams serve tools that act as part of the turn (the ``task`` tool of
:mod:`drover.runtime.workers`): every tool call gets a :class:`TurnScope` in its context, and a
``prelude`` runs inside the turn before its first model call (it finishes work an earlier
turn left unfinished, such as interrupted workers).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drover.core.conversation import ConversationManager
from drover.core.events import (
    AssistantMessage,
    Done,
    EndReason,
    Error,
    Incomplete,
    Retry,
    StepStarted,
    TerminalEvent,
    ToolResults,
    TurnStarted,
    UsageReport,
)
from drover.core.messages import (
    Message,
    ToolResultBlock,
    Usage,
    tool_result_message,
)
from drover.core.model_stream import (
    ModelRequest,
    RetryBudget,
    UsageUpdate,
)
from drover.core.model_stream import RetryNotice as ProviderRetry
from drover.core.output import InvalidOutput, OutputSchema
from drover.core.sinks import EventSink
from drover.errors import ContextOverflowError, EmptyResponseError, ProviderError, StreamError
from drover.providers.base import Provider
from drover.tools.base import FileImages
from drover.tools.registry import ToolRegistry
from drover.turn.compaction import compact_history
from drover.turn.hooks import Hooks
from drover.turn.permissions import PermissionPolicy
from drover.turn.step import Step
from drover.turn.tool_batch import ToolBatch

#: The recorded error of a turn the user interrupted (Esc, Ctrl-C, an interrupt request).
INTERRUPTED_BY_USER = "interrupted by the user"


@dataclass(frozen=True, slots=True, kw_only=True)
class LoopSettings:
    #: Model calls allowed in one turn; reaching it is a resumable pause.
    max_turns: int = 25
    #: Retries one model call may make, before its stream starts (the provider's) and after
    #: (a new attempt of a stream that failed part-way) together: one budget, never reset.
    max_retries: int = 4
    #: Of those, how many may be new attempts of a stream that failed part-way.
    stream_retries: int = 2
    stream_retry_delay: float = 1.0
    max_tokens: int = 8192
    #: Messages kept verbatim when the history is compacted.
    keep_tail: int = 8
    compaction: bool = True


@dataclass(frozen=True, slots=True)
class TurnOptions:
    """What the caller of one turn gives it besides the prompt; never journaled."""

    #: Handed to every tool call of the turn as ``ctx.deps`` (workers of ``task`` included).
    deps: object = None
    #: The model the final answer must be JSON of (None: free text).
    output: OutputSchema[Any] | None = None
    #: Records what a file held before a tool of the turn writes it (the runner's: the journal).
    files: FileImages | None = None


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


class TurnControl:
    """Lets the owner of a turn stop it with a reason other than the user's interruption.

    :meth:`stop` records why and cancels the task running the turn; the loop then ends the
    turn with that reason (``Incomplete``/``Error``) and returns instead of raising.
    """

    def __init__(self) -> None:
        #: The task running the turn, while the loop runs it.
        self.task: asyncio.Task[Any] | None = None
        self.reason: EndReason | None = None
        self.error = ""
        self.retryable = True
        #: Whether :meth:`stop` cancelled the task (rather than the user, or nothing yet).
        self.cancelled = False
        #: Why the turn was interrupted, when it was not the user (a signal, a shutdown): the
        #: interrupted turn's recorded error (shown by `drover show`, the API and the events).
        self.interruption: str | None = None

    @property
    def stopped(self) -> bool:
        return self.reason is not None

    def stop(self, reason: EndReason, error: str, *, retryable: bool = True) -> None:
        """Stop the turn. Ignored once stopped, and while an interruption is already being
        handled (the interruption wins: the turn ends ``interrupted``)."""
        if self.reason is not None:
            return
        self.reason, self.error, self.retryable = reason, error, retryable
        task = self.task
        if task is not None and not task.done() and not task.cancelling():
            self.cancelled = True
            task.cancel()


@dataclass(frozen=True, slots=True)
class TurnScope:
    """What the turn offers a tool call that acts as part of it (``ToolContext.scope``)."""

    loop: AgentLoop
    work: TurnWork
    #: The conversation before the response whose calls run: committed history and the
    #: turn's work up to that response (a snapshot, never changed by the turn afterwards).
    history: tuple[Message, ...]


#: Runs inside the turn before its first model call; may change the turn's work in place.
Prelude = Callable[["AgentLoop", TurnWork], Awaitable[None]]


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
        control: TurnControl | None = None,
        prelude: Prelude | None = None,
        options: TurnOptions | None = None,
        hooks: Hooks | None = None,
    ) -> None:
        self.provider = provider
        self.convo = convo
        self.tools = tools
        self.policy = policy
        self.sink = sink
        self.workdir = workdir
        self.settings = settings or LoopSettings()
        self.control = control or TurnControl()
        self.prelude = prelude
        self.options = options or TurnOptions()
        #: The configured hooks run around each tool call (None: none).
        self.hooks = hooks
        #: The turn and session being run (known once ``run_turn`` got its ``started``).
        self.turn_id = ""
        self.session_id = ""
        self._step: Step | None = None

    async def run_turn(self, work: TurnWork, started: TurnStarted | None = None) -> TerminalEvent:
        """Run the turn to its terminal event (also stored in ``work.outcome``).

        ``started`` is sent first, inside the turn, so an interruption while a consumer
        handles it still ends the turn with its terminal event.
        """
        task = asyncio.current_task()
        control = self.control
        control.task = task
        if started is not None:
            self.turn_id, self.session_id = started.turn_id, started.session_id
        try:
            if started is not None:
                await self.sink.send(started)
            outcome = await self._run(work)
        except asyncio.CancelledError:
            if work.outcome is not None:
                raise  # the turn had already ended: its terminal event went out
            step, self._step = self._step, None
            if step is not None:
                self._count_partial_usage(work, step)
                await step.salvage(self.sink, work.messages)
            if not control.cancelled or control.reason is None:
                await self._end(work, "interrupted", control.interruption or INTERRUPTED_BY_USER)
                raise
            if task is not None:
                task.uncancel()
            return await self._end(work, control.reason, control.error, control.retryable)
        else:
            if control.cancelled:
                # Stopped while the last event was handled, after the end went out: the
                # cancellation it requested has not landed yet; take it here.
                try:
                    await asyncio.sleep(0)
                except asyncio.CancelledError:
                    if task is not None:
                        task.uncancel()
            return outcome
        finally:
            control.task = None

    # -- the loop ------------------------------------------------------------------------------

    async def _run(self, work: TurnWork) -> TerminalEvent:
        if self.prelude is not None:
            await self.prelude(self, work)
        calls = 0
        corrected = False
        while True:
            if calls >= self.settings.max_turns:
                return await self._end(
                    work, "max_turns", f"turn limit reached ({self.settings.max_turns} model calls)"
                )
            calls += 1
            await self.sink.send(StepStarted(step=calls))
            if self.settings.compaction and self.convo.needs_compaction(work.messages):
                await compact_history(self.provider, self.convo, self.settings.keep_tail, self.sink)

            step = self._step = Step()
            try:
                message = await self._stream_with_retries(work, step)
            except ProviderError as exc:
                self._step = None
                await step.salvage(self.sink, work.messages)
                reason: EndReason = (
                    "empty_response" if isinstance(exc, EmptyResponseError) else "error"
                )
                return await self._end(work, reason, str(exc), exc.retryable)

            work.messages.append(message)
            calls_made = message.tool_uses
            if not calls_made:
                self._step = None
                await self.sink.send(AssistantMessage(message=message))
                await self._checkpoint()
                schema, output = self.options.output, None
                if schema is not None:
                    try:
                        output = schema.parse(message.text)
                    except InvalidOutput as exc:
                        if corrected:
                            return await self._end(work, "invalid_output", schema.failure(str(exc)))
                        corrected = True
                        await self._add_message(work, schema.correction(str(exc)))
                        continue
                work.outcome = Done(text=message.text, usage=work.usage, output=output)
                await self.sink.send(work.outcome)
                return work.outcome

            step.phase, step.message = "kept", message
            await self.sink.send(AssistantMessage(message=message))
            await self._checkpoint()
            step.batch = ToolBatch(
                calls_made,
                tools=self.tools,
                policy=self.policy,
                sink=self.sink,
                workdir=self.workdir,
                deps=self.options.deps,
                files=self.options.files,
                may_start=lambda: not self.control.stopped,
                hooks=self.hooks,
                ids=(self.session_id, self.turn_id),
                scope=TurnScope(
                    loop=self,
                    work=work,
                    history=(*self.convo.messages(), *work.messages[:-1]),
                ),
            )
            step.phase = "tools"
            results = await step.batch.run()
            self._step = None
            await self._add_results(work, results)

    async def _checkpoint(self) -> None:
        """Let a stop requested through :class:`TurnControl` land before the turn commits to
        more (running tools, declaring itself done): its cancellation is only delivered at
        an await that suspends, and a consumer that returns at once never suspends."""
        if self.control.cancelled:
            await asyncio.sleep(0)

    async def _stream_with_retries(self, work: TurnWork, step: Step) -> Message:
        budget = RetryBudget(limit=self.settings.max_retries)
        stream_retries = 0
        compacted = False
        while True:
            try:
                return await self._stream_once(work, step, budget)
            except ContextOverflowError:
                self._count_partial_usage(work, step)
                # The request does not fit: summarise the older history once and try again.
                if compacted or not self.settings.compaction:
                    raise
                compacted = True
                if not await compact_history(
                    self.provider, self.convo, self.settings.keep_tail, self.sink
                ):
                    raise
                await step.restart(self.sink)
            except StreamError as exc:
                self._count_partial_usage(work, step)
                if not exc.retryable:
                    raise
                if stream_retries >= self.settings.stream_retries or not budget.spend():
                    if not budget.used:
                        raise
                    raise StreamError(
                        f"{exc} (gave up after {budget.used + 1} attempts)",
                        error_type=exc.error_type,
                        retryable=True,
                    ) from exc
                stream_retries += 1
                shown = step.acc.has_content
                await step.restart(self.sink)
                delay = self.settings.stream_retry_delay * (2 ** (stream_retries - 1))
                await self.sink.send(
                    Retry(attempt=budget.used, delay=delay, error=str(exc), discard_partial=shown)
                )
                await asyncio.sleep(delay)
            except ProviderError:
                # Failures before the stream began were already retried by the provider.
                self._count_partial_usage(work, step)
                raise

    async def _stream_once(self, work: TurnWork, step: Step, budget: RetryBudget) -> Message:
        request = ModelRequest(
            system=self.convo.system_prompt,
            messages=[*self.convo.messages(), *work.messages],
            tools=self.tools.specs(),
            max_tokens=self.settings.max_tokens,
            retry_budget=budget,
            output=None if self.options.output is None else self.options.output.spec,
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
                if isinstance(event, UsageUpdate) and not step.usage_started:
                    await self._report_start(work, step)
                await step.announce(self.sink, event, finished)
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

    async def _report_start(self, work: TurnWork, step: Step) -> None:
        """The use the API reports as its answer starts (Anthropic's input tokens), marked
        partial: it is charged for even if the process dies mid-answer, so the journal keeps it."""
        step.usage_started = True
        so_far = work.usage + step.acc.usage
        if step.acc.usage.input_tokens or step.acc.usage.output_tokens:
            usage = step.acc.usage.as_partial()
            total = (so_far.input_tokens, so_far.output_tokens)
            await self.sink.send(
                UsageReport(usage=usage, total_input=total[0], total_output=total[1])
            )

    # -- abnormal ends -------------------------------------------------------------------------

    @staticmethod
    def _count_partial_usage(work: TurnWork, step: Step) -> None:
        """Usage of a cut-off stream counts as far as it is known, marked partial."""
        if step.usage_counted:
            return
        step.usage_counted = True
        work.usage = work.usage + step.acc.usage.as_partial()

    async def _add_results(self, work: TurnWork, results: list[ToolResultBlock]) -> None:
        await self._add_message(work, tool_result_message(results))

    async def _add_message(self, work: TurnWork, message: Message) -> None:
        """Send ``message`` (tool results, or a correction of the final answer) back to the
        model: it joins the turn's work first, so an interruption while consumers see it keeps
        it."""
        work.messages.append(message)
        await self.sink.send(ToolResults(message=message))

    async def _end(
        self, work: TurnWork, reason: EndReason, error: str, retryable: bool = True
    ) -> TerminalEvent:
        outcome: TerminalEvent
        if work.accumulated:
            outcome = Incomplete(reason=reason, error=error, usage=work.usage, retryable=retryable)
        else:
            outcome = Error(reason=reason, error=error, usage=work.usage, retryable=retryable)
        work.outcome = outcome
        await self.sink.send(outcome)
        return outcome
