"""Typed events: the only way the loop talks to its consumers.

The loop never calls into a UI, a printer or a journal; it emits these values. Every event is
a small frozen dataclass with a ``type`` tag, and :data:`Event` is their union, so a consumer
can ``match`` exhaustively. :func:`event_to_dict` gives the JSON form used by
``--output-format stream-json``, the journal's event log and the HTTP stream.

Terminal events — exactly one ends every turn:

=================  ===========================================================================
``Done``           the model finished normally (no more tool calls)
``Incomplete``     the turn ended abnormally after work accumulated; the work is pending and the
                   next message (or a resume) continues it
``Error``          the turn ended abnormally before anything accumulated
=================  ===========================================================================

``Incomplete.reason`` / ``Error.reason`` say why: ``error`` (API or stream failure),
``empty_response``, ``max_turns``, ``invalid_output`` (a final answer that did not match the
structured output asked for, even after a correction) or ``interrupted``.

Transient events (:func:`is_transient`: ``ToolProgress``) only tell live consumers how
something is going: the journal does not store them, a replay never shows them and a slow
consumer may miss them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, assert_never

from drover.core.messages import Message, Usage, message_to_dict

if TYPE_CHECKING:  # the store reads these names too, in commands that run no event loop
    import asyncio

#: Position of a tool call within one assistant response (0-based): what a consumer keys one
#: spinner per call by, since parallel calls report in any order.
CallIndex: TypeAlias = int

ToolState: TypeAlias = Literal[
    "input-streaming",
    "input-available",
    "awaiting-permission",
    "running",
    "output-available",
    "output-error",
    "denied",
    "interrupted",
]
TERMINAL_TOOL_STATES: frozenset[ToolState] = frozenset(
    {"output-available", "output-error", "denied", "interrupted"}
)

TurnStatus: TypeAlias = Literal["running", "completed", "incomplete", "failed", "interrupted"]
EndReason: TypeAlias = Literal[
    "error", "empty_response", "max_turns", "invalid_output", "interrupted"
]
Decision: TypeAlias = Literal["allow", "always", "deny"]

#: Result text of a tool call cut off before its tool started.
NOT_RUN_TEXT = "Interrupted before it ran: the tool call had no effect."
#: Result text of a read-only tool call cut off while running.
READ_ONLY_CUT_TEXT = "Interrupted while running (read-only tool, no side effects)."
#: Result text of a side-effecting tool call cut off while running.
MAY_HAVE_RUN_TEXT = (
    "Interrupted while running: it may have had effects, and their outcome is unknown. "
    "Check the current state before repeating it."
)


def interrupted_outcome(started: bool, read_only: bool) -> tuple[str, bool]:
    """What a tool call cut off by the end of its turn (an interruption, a crash) becomes:
    ``(result text, outcome unknown)``. Only a call whose tool was entered can have had effects,
    and only a side-effecting one leaves them unknown."""
    if not started:
        return NOT_RUN_TEXT, False
    return (READ_ONLY_CUT_TEXT, False) if read_only else (MAY_HAVE_RUN_TEXT, True)


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnStarted:
    turn_id: str
    session_id: str
    #: The user's message, or None when the turn resumes unfinished work without a new prompt.
    user_message: Message | None
    type: Literal["turn_started"] = "turn_started"


@dataclass(frozen=True, slots=True, kw_only=True)
class StepStarted:
    """A model call begins (``step`` counts model calls within the turn, from 1)."""

    step: int
    type: Literal["step_started"] = "step_started"


@dataclass(frozen=True, slots=True, kw_only=True)
class TextDelta:
    text: str
    #: Index of the content block the text belongs to within the current response.
    index: int = 0
    type: Literal["text_delta"] = "text_delta"


@dataclass(frozen=True, slots=True, kw_only=True)
class ThinkingDelta:
    text: str
    index: int = 0
    type: Literal["thinking_delta"] = "thinking_delta"


@dataclass(frozen=True, slots=True, kw_only=True)
class Retry:
    """A model call failed and is being retried.

    When ``discard_partial`` is true, output of the failed attempt was already streamed:
    consumers must drop the partial message they showed, because the retry produces it anew.
    """

    attempt: int
    delay: float
    error: str
    discard_partial: bool = False
    type: Literal["retry"] = "retry"


@dataclass(frozen=True, slots=True, kw_only=True)
class AssistantMessage:
    """A model response finished (or was cut off, ``partial``) and joined the turn's work."""

    message: Message
    partial: bool = False
    type: Literal["assistant_message"] = "assistant_message"


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolStateChanged:
    """A tool call moved to ``state``; carries what is known at that point."""

    call_id: str
    call_index: CallIndex
    name: str
    state: ToolState
    input: Mapping[str, Any] | None = None
    output: str | None = None
    is_error: bool = False
    #: For side-effecting calls cut off while running: their effects are unknown.
    outcome_unknown: bool = False
    type: Literal["tool_state"] = "tool_state"


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolStart:
    call_index: CallIndex
    id: str
    name: str
    input_summary: str
    #: Where the tool runs its commands, for tools that have a sandbox (``bash``): ``off``,
    #: ``workdir``, ``read-only``, ``workdir+net``…; None for the others.
    sandbox: str | None = None
    type: Literal["tool_start"] = "tool_start"


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolDone:
    call_index: CallIndex
    id: str
    name: str
    is_error: bool
    output_summary: str
    type: Literal["tool_done"] = "tool_done"


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolProgress:
    """A running tool call reported progress (an MCP server's progress notification).

    Transient: never stored or replayed. ``progress`` grows with each report of the call;
    ``total`` (when known) is its value at the end; ``message`` says what is going on."""

    call_id: str
    call_index: CallIndex
    name: str
    progress: float
    total: float | None = None
    message: str | None = None
    type: Literal["tool_progress"] = "tool_progress"


HookPoint: TypeAlias = Literal["pre_tool", "post_tool"]
HookOutcome: TypeAlias = Literal["passed", "blocked", "failed", "timed_out"]


@dataclass(frozen=True, slots=True, kw_only=True)
class HookRun:
    """A configured hook ran for a tool call (see :mod:`drover.turn.hooks`): which one, and what
    came of it. ``passed``: exit status 0; ``blocked``: exit status 2 (a ``pre_tool`` hook
    stopped the call, a ``post_tool`` one sent the model a note); ``failed``: another status
    (``exit_code``), or it could not start (``exit_code`` None: ``message`` says why);
    ``timed_out``: it was killed at its timeout. A ``pre_tool`` hook that timed out or could
    not start blocks its call too."""

    point: HookPoint
    call_id: str
    call_index: CallIndex
    name: str
    #: Where the hook is configured (the config file and its place there).
    hook: str
    outcome: HookOutcome
    exit_code: int | None = None
    #: What the hook wrote on stderr (cut to a few thousand characters), or why it failed.
    message: str = ""
    type: Literal["hook"] = "hook"


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolResults:
    """The results of one response's tool calls, in call order, as sent back to the model."""

    message: Message
    type: Literal["tool_results"] = "tool_results"


@dataclass(slots=True, kw_only=True, eq=False)
class PermissionRequest:
    """A tool needs approval. Answer with :meth:`decide`; never dropped by a channel."""

    request_id: str
    call_id: str
    tool_name: str
    input: Mapping[str, Any]
    summary: str
    decision: asyncio.Future[Decision] = field(repr=False)
    #: With a ``deny`` nobody chose (no terminal to ask, no answer in time): what happened,
    #: which the refused call's result tells the model instead of "the user denied it".
    reason: str | None = field(default=None, repr=False)
    type: Literal["permission_request"] = "permission_request"

    def decide(self, decision: Decision, *, reason: str | None = None) -> bool:
        """Answer the request; returns False when it was already answered or abandoned.
        ``reason`` says why a ``deny`` was given when no person gave it."""
        if self.decision.done():
            return False
        self.decision.get_loop().call_soon_threadsafe(self._set, decision, reason)
        return True

    def _set(self, decision: Decision, reason: str | None) -> None:
        if not self.decision.done():
            self.reason = reason
            self.decision.set_result(decision)


@dataclass(frozen=True, slots=True, kw_only=True)
class UsageReport:
    """After each model response: its usage and the turn's running totals. Also as a response
    starts, when the API reports its input tokens then, with ``usage.partial`` set: the use so
    far, which the report at the response's end includes again (a consumer that adds up
    ``usage`` skips partial reports; the totals are always the turn's so far)."""

    usage: Usage
    total_input: int
    total_output: int
    type: Literal["usage"] = "usage"


@dataclass(frozen=True, slots=True, kw_only=True)
class Compacted:
    """The conversation was summarised to fit the context window."""

    messages_before: int
    messages_after: int
    type: Literal["compacted"] = "compacted"


@dataclass(frozen=True, slots=True, kw_only=True)
class Done:
    text: str
    usage: Usage
    #: With structured output: the validated model instance the ``text`` (its JSON) gives;
    #: None otherwise. Not part of the JSON form (the text is).
    output: Any = None
    type: Literal["done"] = "done"


@dataclass(frozen=True, slots=True, kw_only=True)
class Incomplete:
    reason: EndReason
    error: str
    usage: Usage
    #: Whether sending the same request again may succeed. False for a request the API
    #: rejected as such (invalid, too long after compaction): resuming as is would fail again.
    retryable: bool = True
    type: Literal["incomplete"] = "incomplete"


@dataclass(frozen=True, slots=True, kw_only=True)
class Error:
    reason: EndReason
    error: str
    usage: Usage
    #: Whether sending the same request again may succeed. False for a request the API
    #: rejected as such (invalid, too long after compaction): resuming as is would fail again.
    retryable: bool = True
    type: Literal["error"] = "error"


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerEvent:
    """An event of a worker the ``task`` tool runs inside the parent's tool call ``call_id``.

    ``worker`` is the worker's index within that call. Tool events inside are already
    relabelled: their ``call_index`` is ``worker * 100 + callIndex``, so a
    consumer keeping one spinner per call index keeps them unique across workers. A worker's
    own terminal event arrives wrapped too and never ends the parent's turn.
    """

    call_id: str
    worker: int
    event: Event
    type: Literal["worker"] = "worker"


Event: TypeAlias = (
    TurnStarted
    | StepStarted
    | TextDelta
    | ThinkingDelta
    | Retry
    | AssistantMessage
    | ToolStateChanged
    | ToolStart
    | ToolDone
    | ToolProgress
    | HookRun
    | ToolResults
    | PermissionRequest
    | UsageReport
    | Compacted
    | Done
    | Incomplete
    | Error
    | WorkerEvent
)
TerminalEvent: TypeAlias = Done | Incomplete | Error
#: The terminal event classes, as a tuple: ``isinstance`` with it builds no union per call.
_TERMINAL = (Done, Incomplete, Error)
#: The events a slow live consumer may miss (see :func:`is_droppable`).
_DROPPABLE = (TextDelta, ThinkingDelta, ToolProgress)


def is_terminal(event: Event) -> bool:
    return isinstance(event, _TERMINAL)


def is_droppable(event: Event) -> bool:
    """Events a slow live consumer may miss: the text shows again in the final message, and
    progress is only ever a glimpse."""
    if isinstance(event, WorkerEvent):
        return is_droppable(event.event)
    return isinstance(event, _DROPPABLE)


def is_transient(event: Event) -> bool:
    """Events nobody stores or replays (see the module docstring)."""
    if isinstance(event, WorkerEvent):
        return is_transient(event.event)
    return isinstance(event, ToolProgress)


def turn_status(event: TerminalEvent) -> TurnStatus:
    """The stored/reported status of a turn that ended with ``event``."""
    match event:
        case Done():
            return "completed"
        case Incomplete() | Error() if event.reason == "interrupted":
            return "interrupted"
        case Incomplete():
            return "incomplete"
        case Error():
            return "failed"
        case _:
            assert_never(event)


def event_to_dict(event: Event) -> dict[str, Any]:
    """The JSON form of an event (``type`` first).

    A :class:`WorkerEvent` is ``{"type": "worker", "worker", "parent_call_id", "event"}``
    with the form of the event it carries under ``event``: a worker's ``done`` never reads
    as the end of the parent's turn.
    """
    match event:
        # (the most frequent first: the journal logs a step's call states and these)
        case ToolStateChanged():
            body: dict[str, Any] = {
                "call_id": event.call_id,
                "call_index": event.call_index,
                "name": event.name,
                "state": event.state,
            }
            if event.input is not None:
                body["input"] = dict(event.input)
            if event.output is not None:
                body["output"] = event.output
            if event.is_error:
                body["is_error"] = True
            if event.outcome_unknown:
                body["outcome_unknown"] = True
        case ToolStart():
            body = {
                "call_index": event.call_index,
                "id": event.id,
                "name": event.name,
                "input_summary": event.input_summary,
            }
            if event.sandbox is not None:
                body["sandbox"] = event.sandbox
        case ToolDone():
            body = {
                "call_index": event.call_index,
                "id": event.id,
                "name": event.name,
                "is_error": event.is_error,
                "output_summary": event.output_summary,
            }
        case UsageReport():
            body = {
                "usage": event.usage.to_dict(),
                "total_input": event.total_input,
                "total_output": event.total_output,
            }
        case WorkerEvent():
            return {
                "type": event.type,
                "worker": event.worker,
                "parent_call_id": event.call_id,
                "event": event_to_dict(event.event),
            }
        case TurnStarted():
            # An image's data stays in the turn's message: the event names it (stored once).
            user = (
                message_to_dict(event.user_message, image_data=False)
                if event.user_message
                else None
            )
            body = {
                "turn_id": event.turn_id,
                "session_id": event.session_id,
                "user_message": user,
            }
        case StepStarted():
            body = {"step": event.step}
        case TextDelta() | ThinkingDelta():
            body = {"text": event.text, "index": event.index}
        case Retry():
            body = {
                "attempt": event.attempt,
                "delay": event.delay,
                "error": event.error,
                "discard_partial": event.discard_partial,
            }
        case AssistantMessage():
            body = {"message": message_to_dict(event.message), "partial": event.partial}
        case ToolResults():
            body = {"message": message_to_dict(event.message)}
        case HookRun():
            body = {
                "point": event.point,
                "call_id": event.call_id,
                "call_index": event.call_index,
                "name": event.name,
                "hook": event.hook,
                "outcome": event.outcome,
                "exit_code": event.exit_code,
                "message": event.message,
            }
        case ToolProgress():
            body = {
                "call_id": event.call_id,
                "call_index": event.call_index,
                "name": event.name,
                "progress": event.progress,
                "total": event.total,
                "message": event.message,
                "transient": True,
            }
        case PermissionRequest():
            body = {
                "request_id": event.request_id,
                "call_id": event.call_id,
                "tool_name": event.tool_name,
                "input": dict(event.input),
                "summary": event.summary,
            }
        case Compacted():
            body = {
                "messages_before": event.messages_before,
                "messages_after": event.messages_after,
            }
        case Done():
            body = {"text": event.text, "usage": event.usage.to_dict()}
        case Incomplete() | Error():
            body = {
                "reason": event.reason,
                "error": event.error,
                "usage": event.usage.to_dict(),
                "retryable": event.retryable,
            }
        case _:
            assert_never(event)
    return {"type": event.type, **body}
