"""The records of the journal: what a store gives back of sessions, turns, messages, tool calls,
events and permission grants.

A session holds turns in order; a turn holds the messages it produced (assistant messages and
tool results, a ``partial`` flag on cut-off ones) and its tool calls with their latest state;
a session also holds an append-only event log whose sequence numbers run 1, 2, 3… without
gaps, which is what a client replays a stream from. The records are plain frozen values, the
same whichever backend stored them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from drover.core.events import ToolState, TurnStatus
from drover.core.messages import Message, Usage


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionRecord:
    id: str
    created_at: float
    updated_at: float
    workdir: str
    model: str
    #: The first user prompt, cut to :data:`~drover.journal.rules.TITLE_CHARS` characters.
    title: str | None
    #: Who the session belongs to (the server's hash of a client token), or None.
    owner: str | None = None
    #: For a fork: the session its history was copied from, and the last turn copied (None:
    #: the source had no turn yet).
    forked_from: str | None = None
    forked_turn: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnRecord:
    id: str
    session_id: str
    #: Position in the session, from 1.
    seq: int
    status: TurnStatus
    #: None for a turn that resumed unfinished work without a new message.
    user_message: Message | None
    reason: str | None
    error: str | None
    usage: Usage | None
    #: ``host:pid:start`` of the process running (or last running) the turn.
    owner: str | None
    #: Wall-clock time after which a ``running`` turn counts as abandoned.
    lease_expires_at: float | None
    #: The user dropped this turn's pending work; history skips it.
    discarded: bool
    created_at: float
    updated_at: float
    ended_at: float | None
    #: When a rewind undid this turn (it is then discarded too: history skips it); the
    #: session's last turn carries the time of the latest rewind.
    rewound_at: float | None = None

    @property
    def rewound(self) -> bool:
        return self.rewound_at is not None


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredMessage:
    turn_id: str
    #: Position within the turn, from 1 (a message synthesized from deltas comes last).
    seq: int
    message: Message
    #: Cut off before it finished (salvaged, or rebuilt from text deltas).
    partial: bool
    created_at: float


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallRecord:
    turn_id: str
    call_id: str
    #: The model call (step) of the turn that made the call, from 1.
    step: int
    call_index: int
    name: str
    state: ToolState
    input: Mapping[str, Any] | None
    output: str | None
    is_error: bool
    outcome_unknown: bool
    read_only: bool
    created_at: float
    updated_at: float


@dataclass(frozen=True, slots=True, kw_only=True)
class EventRecord:
    session_id: str
    #: The first sequence number the row covers (its key).
    seq: int
    turn_id: str | None
    type: str
    payload: Mapping[str, Any]
    created_at: float
    #: The last sequence number the row covers: a coalesced ``text_delta`` row covers the
    #: numbers of the live deltas it holds; any other row covers only its own (``seq``).
    last_seq: int = 0
    #: For a coalesced text row: ``(seq, end)`` of each live delta that ends inside it, ``end``
    #: an offset into the row's text; text after the last mark belongs to ``last_seq``. None
    #: when the row cannot be split (redaction changed its length) or is not a text row.
    marks: tuple[tuple[int, int], ...] | None = None

    #: For an event a store logged on its own and gave back
    #: (:class:`~drover.journal.writes.EndTurn`): the number of the event before it in the
    #: log. None when not known (a replay derives it from the order of the log).
    prev: int | None = None

    @property
    def end_seq(self) -> int:
        return max(self.seq, self.last_seq)


@dataclass(frozen=True, slots=True, kw_only=True)
class FileImageRecord:
    """One file write of a tool, as a rewind needs it: what the file held before and the hash
    of what the tool wrote."""

    turn_id: str
    #: The turn's position in its session and the write's position in the turn.
    turn_seq: int
    seq: int
    call_id: str
    #: The file's absolute path, and as the tool showed it (relative to the working directory).
    path: str
    shown: str
    #: ``kept`` (the content is in the journal), ``absent`` (the tool created the file) or
    #: ``too_large`` (over the cap: not kept, not restorable).
    before: Literal["kept", "absent", "too_large"]
    before_hash: str | None
    before_size: int | None
    after_hash: str
    #: When a rewind put the content before back (None: the write is still on disk).
    restored_at: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class GrantRecord:
    """A permission the user granted "always" in one session."""

    session_id: str
    #: What it allows: a tool's name (every call of that tool).
    rule: str
    created_at: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Delivery:
    """A turn's end to announce to a webhook, as a deliverer claimed it from the outbox."""

    #: The delivery's id, also in its body: a receiver drops a repeat by it.
    id: str
    session_id: str
    turn_id: str
    url: str
    #: The exact JSON text to send (and sign).
    body: str
    #: Attempts made before this one.
    attempts: int


@dataclass(frozen=True, slots=True, kw_only=True)
class PruneBatch:
    """What one bounded batch of retention deleted (or, dry, would delete)."""

    sessions: int
    turns: int
    events: int
    #: Outbox rows of deliveries done or given up, older than the cut-off.
    deliveries: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class QueuedMessage:
    """A message posted while a turn of its session ran, to run as a turn of its own once
    the session is free (in ``seq`` order, once)."""

    id: str
    session_id: str
    #: Position among the session's queued messages, from 1 (never reused).
    seq: int
    content: str
    #: ``queued`` (waiting), ``started`` (``turn_id`` ran it) or ``cancelled``.
    status: str
    turn_id: str | None
    created_at: float
    #: Where the end of the message's turn is announced (its own webhook; None: the
    #: server's, if any).
    webhook: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Transcript:
    """A session as one read of the journal saw it (what a client loads before it follows the
    session's events): its turns with their messages — a step still streaming as its partial
    message — its tool calls, its queued messages, and ``last_seq``, the highest number its log
    held then. Everything the events up to ``last_seq`` did is in it and nothing of a later
    one, so a client that replays the events after ``last_seq`` has everything."""

    session: SessionRecord
    turns: list[tuple[TurnRecord, list[StoredMessage]]]
    tool_calls: list[ToolCallRecord]
    queued: list[QueuedMessage]
    last_seq: int
    #: What each running turn used so far, as its last ``usage`` event says.
    running_usage: dict[str, Usage]
