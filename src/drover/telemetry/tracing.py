"""Spans of a turn, built from its events: the turn, each model call, each tool call, each
worker of a ``task`` call (names in :mod:`drover.telemetry.genai`).

:class:`TurnTrace` is a live event sink the runner adds to a turn when traces are on. The
runner starts the turn's span before the turn is recorded (its parent is the OpenTelemetry
context the turn was started in: the HTTP request's ``traceparent``, a library caller's own
span), stores its ``traceparent`` with the turn so that another process can link to it, and
links it to the span of the turn it continues. Everything else comes from the events:

==========================  =================================================================
``step_started``            a ``chat {model}`` span, child of the agent's span
first text, thinking or     ``gen_ai.response.time_to_first_chunk`` on the model call
tool input
``retry``                   an event on the model call (a provider's retry before the stream,
                            or a new attempt of a stream that broke)
``usage``                   the call's tokens
``assistant_message``       ends the call (a partial message: the call was cut; it ends with
                            the turn)
``tool_state``              an ``execute_tool {name}`` span from the call's first state to its
                            last, an event per state; the final state, whether its outcome is
                            unknown, an error status for ``output-error``
``worker``                  an ``invoke_agent worker`` span per worker, child of its ``task``
                            call, holding the worker's own model and tool calls
``done``/``incomplete``/    ends the turn: ``drover.turn.status``, the turn's tokens, an error
``error``                   status when it failed or stopped incomplete
==========================  =================================================================

The sink never awaits and never raises into the turn (a live consumer's failure would only
detach it). :func:`recovery_span` records a dead process's turn ended by this one, as a child
of that turn's span.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from drover.core.events import (
    TERMINAL_TOOL_STATES,
    AssistantMessage,
    Compacted,
    Done,
    Error,
    Event,
    Incomplete,
    Retry,
    StepStarted,
    TerminalEvent,
    TextDelta,
    ThinkingDelta,
    ToolStateChanged,
    TurnStarted,
    UsageReport,
    WorkerEvent,
    turn_status,
)
from drover.core.messages import Usage
from drover.journal.records import ToolCallRecord
from drover.journal.redact import Redactor
from drover.telemetry import genai

#: Statuses of a turn (or worker) that ended badly: its span gets an error status.
_FAILED = frozenset({"failed", "incomplete"})


def traceparent_of(span: Span) -> str | None:
    """The W3C ``traceparent`` of ``span`` (None when it is not a valid one)."""
    ctx = span.get_span_context()
    if not ctx.is_valid:
        return None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def span_context_of(traceparent: str) -> SpanContext | None:
    """The remote span a stored ``traceparent`` names (None when it is malformed)."""
    parts = traceparent.strip().split("-")
    if len(parts) != 4 or parts[0] != "00":
        return None
    try:
        trace_id, span_id, flags = int(parts[1], 16), int(parts[2], 16), int(parts[3], 16)
    except ValueError:
        return None
    ctx = SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(flags & 0xFF))
    return ctx if ctx.is_valid else None


@dataclass(slots=True, eq=False)
class _Agent:
    """The spans of one agent: the turn's own, or a worker's."""

    span: Span
    step: Span | None = None
    #: When the model call began (monotonic), and whether its first chunk came.
    step_began: float = 0.0
    first_chunk: bool = False
    tools: dict[str, Span] = field(default_factory=dict)
    workers: dict[tuple[str, int], _Agent] = field(default_factory=dict)


class TurnTrace:
    """The spans of one turn (see the module docstring); a live event sink."""

    def __init__(
        self,
        tracer: trace.Tracer,
        *,
        session_id: str,
        protocol: str,
        model: str,
        max_tokens: int | None = None,
        redactor: Redactor | None = None,
        capture_content: bool = False,
        parent: otel_context.Context | None = None,
    ) -> None:
        self._tracer = tracer
        self._redactor = redactor or Redactor()
        self._capture = capture_content
        self._model = model
        self._common: dict[str, Any] = {
            genai.PROVIDER: genai.provider_name(protocol),
            genai.CONVERSATION: session_id,
            genai.SESSION_ID: session_id,
        }
        self._chat: dict[str, Any] = {
            **self._common,
            genai.OPERATION: "chat",
            genai.REQUEST_MODEL: model,
        }
        if max_tokens is not None:
            self._chat[genai.MAX_TOKENS] = max_tokens
        span = tracer.start_span(
            f"invoke_agent {genai.AGENT}",
            context=parent,
            kind=SpanKind.INTERNAL,
            attributes={
                **self._common,
                genai.OPERATION: "invoke_agent",
                genai.AGENT_NAME: genai.AGENT,
                genai.REQUEST_MODEL: model,
            },
        )
        self._turn = _Agent(span)
        self._ended = False

    # -- the runner's side -----------------------------------------------------------------------

    @property
    def span(self) -> Span:
        return self._turn.span

    @property
    def traceparent(self) -> str | None:
        return traceparent_of(self._turn.span)

    def ids(self) -> tuple[str, str] | None:
        """``(trace id, span id)`` of the turn's span, in hex (None: not a valid span)."""
        ctx = self._turn.span.get_span_context()
        return (f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}") if ctx.is_valid else None

    def began(self, turn_id: str) -> None:
        """The journal recorded the turn as ``turn_id``."""
        self._turn.span.set_attribute(genai.TURN_ID, turn_id)

    def link(self, traceparent: str, turn_id: str) -> None:
        """Link the turn to the span of the turn it continues (stored as ``traceparent``)."""
        ctx = span_context_of(traceparent)
        if ctx is not None:
            self._turn.span.add_link(ctx, {genai.TURN_ID: turn_id, "drover.link": "continues"})

    def abandon(self, why: BaseException) -> None:
        """The turn never began (the session was busy, the journal failed, an interruption)."""
        if self._ended:
            return
        span = self._turn.span
        if isinstance(why, asyncio.CancelledError):
            # Interrupted as it began: the runner ends the turn ``interrupted``, not failed.
            span.set_attribute(genai.TURN_STATUS, "interrupted")
        else:
            span.set_attribute(genai.ERROR_TYPE, type(why).__name__)
            span.set_status(Status(StatusCode.ERROR, str(why) or type(why).__name__))
        self._end_agent(self._turn)

    def close(self) -> None:
        """End whatever the events left open (the turn's task ended without its terminal
        event reaching this sink)."""
        if not self._ended:
            self._turn.span.set_attribute(genai.TURN_STATUS, "unknown")
            self._end_agent(self._turn)

    # -- the sink ----------------------------------------------------------------------------

    async def send(self, event: Event) -> None:
        if not self._ended:
            self._handle(self._turn, event, top=True)

    def _handle(self, agent: _Agent, event: Event, *, top: bool) -> None:
        match event:
            case TextDelta() | ThinkingDelta():
                if not agent.first_chunk:
                    self._first_chunk(agent)
            case ToolStateChanged():
                self._tool_state(agent, event)
            case StepStarted():
                self._step_started(agent, event.step)
            case UsageReport():
                if agent.step is not None:
                    agent.step.set_attributes(_usage(event.usage))
            case AssistantMessage():
                step = agent.step
                if step is None:
                    return
                if self._capture:
                    message = self._redactor.redact_message(event.message)
                    step.set_attribute(genai.OUTPUT_MESSAGES, genai.messages_json([message]))
                if event.partial:
                    step.set_attribute("drover.partial", True)
                else:
                    step.end()
                    agent.step = None
            case Retry():
                target = agent.step or agent.span
                target.add_event(
                    "retry",
                    {
                        "drover.retry.attempt": event.attempt,
                        "drover.retry.delay": event.delay,
                        "drover.retry.discard_partial": event.discard_partial,
                        "error.message": self._redactor.redact(event.error),
                    },
                )
            case WorkerEvent():
                self._worker_event(agent, event)
            case TurnStarted():
                if self._capture and event.user_message is not None:
                    message = self._redactor.redact_message(event.user_message)
                    agent.span.set_attribute(genai.INPUT_MESSAGES, genai.messages_json([message]))
            case Compacted():
                agent.span.add_event(
                    "compacted",
                    {
                        "drover.messages_before": event.messages_before,
                        "drover.messages_after": event.messages_after,
                    },
                )
            case Done() | Incomplete() | Error():
                self._ended_with(agent, event)
                if top:
                    self._ended = True
            case _:
                pass  # (tool start/done, progress, results, permission requests: no span)

    # -- model calls -------------------------------------------------------------------------

    def _step_started(self, agent: _Agent, step: int) -> None:
        if agent.step is not None:  # (a call left open: ended as it stands)
            agent.step.end()
        agent.step = self._tracer.start_span(
            f"chat {self._model}",
            context=trace.set_span_in_context(agent.span),
            kind=SpanKind.CLIENT,
            attributes={**self._chat, genai.STEP: step},
        )
        agent.step_began = time.monotonic()
        agent.first_chunk = False

    def _first_chunk(self, agent: _Agent) -> None:
        agent.first_chunk = True
        if agent.step is not None:
            agent.step.set_attribute(genai.FIRST_CHUNK, time.monotonic() - agent.step_began)

    # -- tool calls --------------------------------------------------------------------------

    def _tool_state(self, agent: _Agent, event: ToolStateChanged) -> None:
        if event.state == "input-streaming" and not agent.first_chunk:
            self._first_chunk(agent)
        span = agent.tools.get(event.call_id)
        if span is None:
            span = agent.tools[event.call_id] = self._tracer.start_span(
                f"execute_tool {event.name}",
                context=trace.set_span_in_context(agent.span),
                kind=SpanKind.INTERNAL,
                attributes={
                    **self._common,
                    genai.OPERATION: "execute_tool",
                    genai.TOOL_NAME: event.name,
                    genai.TOOL_CALL_ID: event.call_id,
                    genai.TOOL_TYPE: "function",
                },
            )
        span.add_event(genai.TOOL_STATE, {genai.TOOL_STATE: event.state})
        if self._capture and event.input is not None:
            arguments = self._redactor.redact_obj(dict(event.input))
            span.set_attribute(genai.TOOL_ARGUMENTS, genai.arguments_json(arguments))
        if event.state not in TERMINAL_TOOL_STATES:
            return
        del agent.tools[event.call_id]
        span.set_attribute(genai.TOOL_STATE, event.state)
        span.set_attribute(genai.OUTCOME_UNKNOWN, event.outcome_unknown)
        if self._capture and event.output is not None:
            span.set_attribute(genai.TOOL_RESULT, self._redactor.redact(event.output))
        if event.state == "output-error":
            span.set_attribute(genai.ERROR_TYPE, "tool_error")
            span.set_status(Status(StatusCode.ERROR, "the tool reported an error"))
        span.end()

    # -- workers -----------------------------------------------------------------------------

    def _worker_event(self, agent: _Agent, event: WorkerEvent) -> None:
        key = (event.call_id, event.worker)
        inner = event.event
        worker = agent.workers.get(key)
        if isinstance(inner, TurnStarted) or worker is None:
            if worker is not None:  # (a worker started again: its old span ends)
                self._end_agent(worker)
            parent = agent.tools.get(event.call_id, agent.span)
            worker = agent.workers[key] = _Agent(
                self._tracer.start_span(
                    f"invoke_agent {genai.AGENT} worker",
                    context=trace.set_span_in_context(parent),
                    kind=SpanKind.INTERNAL,
                    attributes={
                        **self._common,
                        genai.OPERATION: "invoke_agent",
                        genai.AGENT_NAME: f"{genai.AGENT} worker",
                        genai.REQUEST_MODEL: self._model,
                        genai.WORKER: event.worker,
                        "drover.worker.call_id": event.call_id,
                    },
                )
            )
        self._handle(worker, inner, top=False)
        if isinstance(inner, Done | Incomplete | Error):
            del agent.workers[key]

    # -- ends --------------------------------------------------------------------------------

    def _ended_with(self, agent: _Agent, event: TerminalEvent) -> None:
        status = turn_status(event)
        reason = None if isinstance(event, Done) else event.reason
        span = agent.span
        attributes: dict[str, Any] = {genai.TURN_STATUS: status, **_usage(event.usage)}
        if reason is not None:
            attributes[genai.TURN_REASON] = reason
        if isinstance(event, Done) and self._capture:
            answer = self._redactor.redact(event.text)
            attributes[genai.OUTPUT_MESSAGES] = genai.answer_json(answer)
        span.set_attributes(attributes)
        if status in _FAILED and reason is not None:
            message = self._redactor.redact(event.error) if not isinstance(event, Done) else ""
            span.set_attribute(genai.ERROR_TYPE, reason)
            span.set_status(Status(StatusCode.ERROR, message))
            if agent.step is not None:
                agent.step.set_attribute(genai.ERROR_TYPE, reason)
                agent.step.set_status(Status(StatusCode.ERROR, message))
        elif reason is not None and agent.step is not None:
            agent.step.set_attribute(genai.TURN_REASON, reason)
        self._end_agent(agent)

    def _end_agent(self, agent: _Agent) -> None:
        for worker in agent.workers.values():
            worker.span.set_attribute(genai.TURN_STATUS, "unknown")
            self._end_agent(worker)
        agent.workers.clear()
        for span in agent.tools.values():
            span.end()
        agent.tools.clear()
        if agent.step is not None:
            agent.step.end()
            agent.step = None
        agent.span.end()
        if agent is self._turn:
            self._ended = True


def _usage(usage: Usage) -> dict[str, Any]:
    out: dict[str, Any] = {
        genai.INPUT_TOKENS: usage.input_tokens,
        genai.OUTPUT_TOKENS: usage.output_tokens,
    }
    if usage.cache_read_tokens:
        out[genai.CACHE_READ] = usage.cache_read_tokens
    if usage.cache_write_tokens:
        out[genai.CACHE_WRITE] = usage.cache_write_tokens
    return out


def recovery_span(
    tracer: trace.Tracer,
    *,
    turn_id: str,
    session_id: str,
    traceparent: str | None,
    calls: Sequence[ToolCallRecord],
) -> None:
    """Record that this process ended a dead process's turn: a ``drover.recover`` span, child
    of that turn's span when its ``traceparent`` is known (so the dead turn's trace shows how
    it ended), with an event per tool call it closed and whether that call's outcome is
    unknown."""
    remote = None if traceparent is None else span_context_of(traceparent)
    parent = None
    if remote is not None:
        parent = trace.set_span_in_context(trace.NonRecordingSpan(remote))
    span = tracer.start_span(
        "drover.recover",
        context=parent if parent is not None else otel_context.Context(),
        kind=SpanKind.INTERNAL,
        attributes={
            genai.SESSION_ID: session_id,
            genai.CONVERSATION: session_id,
            genai.TURN_ID: turn_id,
            genai.TURN_STATUS: "interrupted",
        },
        links=None if remote is None else [Link(remote, {"drover.link": "recovers"})],
    )
    for call in calls:
        span.add_event(
            genai.TOOL_STATE,
            {
                genai.TOOL_NAME: call.name,
                genai.TOOL_CALL_ID: call.call_id,
                genai.TOOL_STATE: call.state,
                genai.OUTCOME_UNKNOWN: call.outcome_unknown,
            },
        )
    span.end()
