"""The journal's writes, as values: the one way a running turn is written to a store.

A store makes a list of them with
:meth:`TurnJournal.write_batch <drover.journal.protocol.TurnJournal.write_batch>`: in order,
in one transaction — all or nothing — which is how the journal commits a tool call's state with
its event-log row, or a step's assistant message with its log row (the message's write drops
the step's text deltas in the same transaction). A single write is a batch of one. Each value
says what its write does and what it gives back in the batch's results.

Only a ``running`` turn takes more work: a write to a turn that ended, or (``EndTurn`` with an
``owner``) that another process holds, fails with :class:`~drover.errors.LeaseLostError`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from drover.core.events import ToolState, TurnStatus
from drover.core.messages import Message, Usage, message_to_dict

#: In a stored terminal event, the seq (in its turn) of the message whose text is the event's
#: ``text``: the journal stores an answer once, in its message, and a store puts it back in
#: place when it reads the log (:meth:`~drover.journal.protocol.EventLog.events_after`).
TEXT_OF = "text_of"
#: In a stored ``assistant_message``/``tool_results`` event, the seq (in its turn) of the
#: message the event carries: the message is stored once, in ``messages``, and put back in
#: place (as ``message``) when the log is read.
MESSAGE_OF = "message_of"
#: In a stored terminal ``tool_state`` event, in place of its ``output``: the id of the call
#: (of the event's turn) whose row holds that output. The output is stored once, in
#: ``tool_calls``, and put back in place (as ``output``) when the log is read.
OUTPUT_OF = "output_of"


@dataclass(frozen=True, slots=True)
class AppendMessage:
    """Append a message to the turn; with ``step``, that step's text deltas are dropped in the
    same write (the message supersedes them). Gives back the message's seq in the turn."""

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
    that the loop's differs from). Gives back None."""

    turn_id: str
    seq: int | None
    message: Message


@dataclass(frozen=True, slots=True)
class AppendPartialText:
    """Append streamed text; the session's log shows it from this write on as a coalesced
    ``text_delta`` event (``{"type", "text", "index", "step"}``). With ``seq`` the row covers
    the numbers ``seq..last_seq`` and keeps the live deltas' ``marks`` (see
    :class:`~drover.journal.records.EventRecord`). Gives back its seq."""

    turn_id: str
    step: int
    block_index: int
    text: str
    seq: int | None = None
    last_seq: int | None = None
    marks: Sequence[tuple[int, int]] | None = None


@dataclass(frozen=True, slots=True)
class DiscardPartialText:
    """Drop a step's text deltas from what recovery would keep (its stream is being retried);
    the log keeps showing them, before the retry's row. Gives back None."""

    turn_id: str
    step: int


@dataclass(frozen=True, slots=True)
class AppendEvent:
    """Append ``event`` (``events.event_to_dict`` form, with a ``type``) to the session's log.
    Its number is ``seq`` when given (a number the journal handed out; the row covers
    ``seq..last_seq``), else the next after every number used or reserved. Gives back its
    seq."""

    session_id: str
    turn_id: str | None
    event: Mapping[str, Any]
    seq: int | None = None
    last_seq: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class UpsertToolCall:
    """Create or move a tool call; a None ``input``/``output`` keeps the stored one, and a
    call in a terminal state keeps it (a late write cannot reopen it). Gives back None."""

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
    #: The model call (step) of the turn that made the call; 0 keeps the stored one.
    step: int = 0
    #: The event-log row of this state, logged in the same write. With :data:`OUTPUT_OF` in
    #: its payload it refers to the call's row when this write stored ``output`` there; when
    #: it did not (the call had ended already) the row is logged with ``output`` in place.
    logged: AppendEvent | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class EndTurn:
    """Record how the turn ended. Tool calls still open become ``interrupted`` and left-over
    text deltas become a partial message, so nothing stays "in progress"; ``event`` (the
    turn's terminal event) is logged in the same transaction, so a turn never ends without it
    or logs it without ending. Gives back the events this logged (a list of
    :class:`~drover.journal.records.EventRecord`, the terminal one last), numbered from
    ``first_seq`` (the journal, the log's only writer while it holds the lease, passes its
    next number) or else after every number used or reserved; each record's ``prev`` is the
    number before it in the log. With ``first_seq`` the session's reservation
    (:meth:`~drover.journal.protocol.EventLog.reserve_seqs`) shrinks to the last number
    logged, in the same transaction: the journal hands out no number after its turn's end.

    Only a ``running`` turn can end (``status`` is never ``running``), and with ``owner`` only
    while ``owner`` holds it."""

    turn_id: str
    status: TurnStatus
    reason: str | None = None
    error: str | None = None
    usage: Usage | None = None
    owner: str | None = None
    event: Mapping[str, Any] | None = None
    first_seq: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class KeepFileImage:
    """Record that a tool of the turn is about to write the file ``path`` (``shown``: as the
    tool shows it): what it held before — ``before`` its bytes, None when it did not exist —
    and ``after_hash``, the SHA-256 of what the tool writes. Bytes over ``cap`` are not kept
    (the row says ``too_large``); kept ones are stored once per distinct content. Made before
    the write, so a rewind knows of every write that may have happened. Gives back None."""

    turn_id: str
    call_id: str
    path: str
    shown: str
    before: bytes | None
    after_hash: str
    cap: int


JournalWrite: TypeAlias = (
    AppendMessage
    | ReplaceMessage
    | AppendPartialText
    | DiscardPartialText
    | AppendEvent
    | UpsertToolCall
    | EndTurn
    | KeepFileImage
)


def with_message(event: Mapping[str, Any], message: Message) -> dict[str, Any]:
    """A row that refers to its message (:data:`MESSAGE_OF`) with the message in place."""
    body = message_to_dict(message)
    return {
        ("message" if k == MESSAGE_OF else k): (body if k == MESSAGE_OF else v)
        for k, v in event.items()
    }


def with_output(event: Mapping[str, Any], output: str | None) -> dict[str, Any]:
    """A row that refers to its call's output (:data:`OUTPUT_OF`) with the output in place."""
    return {
        ("output" if k == OUTPUT_OF else k): (output if k == OUTPUT_OF else v)
        for k, v in event.items()
    }


def referring_output(row: AppendEvent, call_id: str) -> AppendEvent:
    """``row`` (a terminal ``tool_state`` event) with its ``output`` replaced by
    :data:`OUTPUT_OF`, the id of the call whose row holds it."""
    event = {
        (OUTPUT_OF if k == "output" else k): (call_id if k == "output" else v)
        for k, v in row.event.items()
    }
    return AppendEvent(row.session_id, row.turn_id, event, row.seq, row.last_seq)


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
