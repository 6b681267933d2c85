"""Journal writes as values, so that writes ready at the same moment commit together.

Each class below describes one call of the journal's part of the store (the same arguments as
the method of the same name). A store that implements :class:`BatchWriter` makes a list of them
in one executor hop and one transaction — all or nothing, in order — which is how the journal
commits a tool call's state with its event-log row, or a step's assistant message with its log
row (the message's write drops the step's text deltas in the same transaction). A store without
it (a worker's log, a test double) gets them one by one through :func:`apply`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeAlias, runtime_checkable

from drover.events import ToolState, TurnStatus
from drover.journal.records import EventRecord
from drover.messages import Message, Usage, message_to_dict

#: In a stored terminal event, the seq (in its turn) of the message whose text is the event's
#: ``text``: the journal stores an answer once, in its message, and a store puts it back in
#: place when it reads the log (:meth:`~drover.journal.protocol.EventLog.events_after`).
TEXT_OF = "text_of"
#: In a stored ``assistant_message``/``tool_results`` event, the seq (in its turn) of the
#: message the event carries: the message is stored once, in ``messages``, and put back in
#: place (as ``message``) when the log is read.
MESSAGE_OF = "message_of"


@dataclass(frozen=True, slots=True)
class AppendMessage:
    turn_id: str
    message: Message
    partial: bool = False
    step: int | None = None
    #: The event-log row that carries the message, logged in the same write with
    #: :data:`MESSAGE_OF` set to the message's seq (its payload holds the key, value None).
    logged: AppendEvent | None = None
    #: The first number of the step's coalesced text rows, when they are to be folded into the
    #: message (:mod:`drover.journal.fold`) in the same write; None moves them as they are.
    fold_from: int | None = None


@dataclass(frozen=True, slots=True)
class ReplaceMessage:
    """Put ``message`` in place of the turn's message ``seq`` — its latest message when
    ``seq`` is None — (a results message written ahead, see :mod:`drover.journal.step_results`,
    that the loop's differs from)."""

    turn_id: str
    seq: int | None
    message: Message


@dataclass(frozen=True, slots=True)
class AppendPartialText:
    turn_id: str
    step: int
    block_index: int
    text: str
    seq: int | None = None
    last_seq: int | None = None
    marks: Sequence[tuple[int, int]] | None = None


@dataclass(frozen=True, slots=True)
class DiscardPartialText:
    turn_id: str
    step: int


@dataclass(frozen=True, slots=True)
class AppendEvent:
    session_id: str
    turn_id: str | None
    event: Mapping[str, Any]
    seq: int | None = None
    last_seq: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class UpsertToolCall:
    turn_id: str
    call_id: str
    call_index: int
    name: str
    state: ToolState
    input: Mapping[str, Any] | None = None
    output: str | None = None
    is_error: bool = False
    outcome_unknown: bool = False
    read_only: bool = False
    step: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class EndTurn:
    turn_id: str
    status: TurnStatus
    reason: str | None = None
    error: str | None = None
    usage: Usage | None = None
    owner: str | None = None
    event: Mapping[str, Any] | None = None
    first_seq: int | None = None


JournalWrite: TypeAlias = (
    AppendMessage
    | ReplaceMessage
    | AppendPartialText
    | DiscardPartialText
    | AppendEvent
    | UpsertToolCall
    | EndTurn
)


@runtime_checkable
class BatchWriter(Protocol):
    async def write_batch(self, writes: Sequence[JournalWrite]) -> list[Any]:
        """Make ``writes`` in order in one transaction (all or none); each one's result, as
        its method returns it. A write that fails rolls the whole batch back."""
        ...


def with_message(event: Mapping[str, Any], message: Message) -> dict[str, Any]:
    """A row that refers to its message (:data:`MESSAGE_OF`) with the message in place."""
    body = message_to_dict(message)
    return {
        ("message" if k == MESSAGE_OF else k): (body if k == MESSAGE_OF else v)
        for k, v in event.items()
    }


def referring(
    row: AppendEvent, message: Message, body: dict[str, Any] | None = None
) -> AppendEvent | None:
    """``row`` with its ``message`` replaced by :data:`MESSAGE_OF` (the store sets the number,
    or the caller), when the row carries exactly that message (``body``: its form, when the
    caller built the row's from it); None otherwise."""
    carried = row.event.get("message")
    if carried is not body and carried != message_to_dict(message):
        return None
    event = {
        (MESSAGE_OF if k == "message" else k): (None if k == "message" else v)
        for k, v in row.event.items()
    }
    return AppendEvent(row.session_id, row.turn_id, event, row.seq, row.last_seq)


async def apply(store: Any, write: JournalWrite) -> Any:
    """Make one write through the store's method of the same name (a message with its log
    row or its folding: in one transaction of its own when the store makes batches)."""
    whole = isinstance(write, AppendMessage) and (write.logged, write.fold_from) != (None, None)
    if whole and isinstance(store, BatchWriter):
        return (await store.write_batch([write]))[0]
    match write:
        case AppendMessage(turn_id, message, partial, step, row):
            seq = await store.append_message(turn_id, message, partial=partial, step=step)
            if row is not None:
                event = with_message(row.event, message)
                await store.append_event(
                    row.session_id, row.turn_id, event, seq=row.seq, last_seq=row.last_seq
                )
            return seq
        case ReplaceMessage(turn_id, seq, message):
            return await store.replace_message(turn_id, seq, message)
        case AppendPartialText(turn_id, step, index, text, seq, last_seq, marks):
            return await store.append_partial_text(
                turn_id, step, index, text, seq=seq, last_seq=last_seq, marks=marks
            )
        case DiscardPartialText(turn_id, step):
            return await store.discard_partial_text(turn_id, step)
        case AppendEvent(session_id, turn_id, event, seq, last_seq):
            return await store.append_event(session_id, turn_id, event, seq=seq, last_seq=last_seq)
        case UpsertToolCall():
            return await store.upsert_tool_call(
                write.turn_id,
                write.call_id,
                call_index=write.call_index,
                name=write.name,
                state=write.state,
                input=write.input,
                output=write.output,
                is_error=write.is_error,
                outcome_unknown=write.outcome_unknown,
                read_only=write.read_only,
                step=write.step,
            )
        case EndTurn():
            logged: list[EventRecord] = await store.end_turn(
                write.turn_id,
                write.status,
                reason=write.reason,
                error=write.error,
                usage=write.usage,
                owner=write.owner,
                event=write.event,
                first_seq=write.first_seq,
            )
            return logged
