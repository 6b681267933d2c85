"""How a turn ended, as the library gives it back: :class:`RunResult`, generic in its output.

A :class:`RunResult` is ``RunResult[str]`` (the answer's text) for a turn without an
``output_type``, ``RunResult[MyModel]`` for one with it (the validated model). It is built from
the turn's terminal event and the session's unfinished work (:func:`result_of`); the session
handle (:mod:`drover.agent.session`) and a turn's stream (:mod:`drover.agent.turn_stream`) both give
one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic

from pydantic import BaseModel
from typing_extensions import TypeVar

from drover.core.events import (
    Done,
    EndReason,
    Error,
    Incomplete,
    TerminalEvent,
    TurnStatus,
    turn_status,
)
from drover.core.messages import Message, Usage
from drover.core.output import OutputSchema
from drover.turn.state import AgentSession

#: What a run outputs: the answer's text (``str``) or an ``output_type`` model.
OutputT = TypeVar("OutputT", bound=BaseModel | str, default=str)
#: The output of one run given its own ``output_type``.
RunOutputT = TypeVar("RunOutputT", bound=BaseModel | str)


def output_schema(output_type: type[Any] | None) -> OutputSchema[Any] | None:
    """The schema of an ``output_type`` (None or ``str``: the answer is free text)."""
    return None if output_type is None or output_type is str else OutputSchema.of(output_type)


# Not slotted: a slotted frozen generic dataclass cannot be built through its alias.
@dataclass(frozen=True, kw_only=True)
class RunResult(Generic[OutputT]):
    """How a turn ended and what it left."""

    session_id: str
    turn_id: str
    status: TurnStatus
    #: The final answer; for a turn that did not complete, the last text it produced.
    text: str
    usage: Usage
    #: Work of unfinished turns kept for the next run (empty once a turn completes).
    pending: tuple[Message, ...]
    #: Once the turn completed: the validated ``output_type`` instance, or without one the
    #: answer's text. None for a turn that did not complete.
    output: OutputT | None = None
    #: Why a turn that did not complete ended (``error``, ``max_turns``, ``invalid_output``,
    #: ``interrupted``…).
    reason: EndReason | None = None
    error: str | None = None
    #: For a turn that did not complete: whether sending the same request again may succeed.
    retryable: bool = True

    @property
    def completed(self) -> bool:
        return self.status == "completed"


def last_text(pending: Sequence[Message]) -> str:
    """The last assistant text of unfinished work (what a turn that did not complete said)."""
    return next((m.text for m in reversed(pending) if m.role == "assistant" and m.text), "")


def result_of(session: AgentSession, turn_id: str, event: TerminalEvent) -> RunResult[Any]:
    """The :class:`RunResult` of a turn of ``session`` that ended with ``event``."""
    pending = session.pending
    if isinstance(event, Done):
        return RunResult(
            session_id=session.id,
            turn_id=turn_id,
            status="completed",
            text=event.text,
            usage=event.usage,
            pending=pending,
            output=event.text if event.output is None else event.output,
        )
    return RunResult(
        session_id=session.id,
        turn_id=turn_id,
        status=turn_status(event),
        text=last_text(pending),
        usage=event.usage,
        pending=pending,
        reason=event.reason,
        error=event.error,
        retryable=event.retryable,
    )


#: The types of the events that end a turn, as the journal's log names them.
TERMINAL_TYPES = frozenset({"done", "incomplete", "error"})


def terminal_event(payload: Mapping[str, Any]) -> TerminalEvent:
    """The terminal event a turn ended with, from its logged form (a turn another process
    ran; a ``done``'s output is its text)."""
    usage = Usage.from_dict(payload.get("usage") or {})
    if payload["type"] == "done":
        return Done(text=str(payload.get("text", "")), usage=usage)
    kind = Incomplete if payload["type"] == "incomplete" else Error
    return kind(
        reason=payload["reason"],
        error=str(payload.get("error") or ""),
        usage=usage,
        retryable=bool(payload.get("retryable", True)),
    )
