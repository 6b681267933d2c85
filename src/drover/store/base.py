"""The journal's seams: the narrow store protocols, their records, and rules every backend shares.

Each user takes the protocol of what it uses — :class:`SessionStore` (sessions and what they
hold), :class:`TurnLeases` (starting, holding and recovering turns), :class:`TurnJournal` (the
writes that record a running turn) and :class:`EventLog` (reading and numbering the log) —
and :class:`Store`, all four with a lifecycle, is what a backend implements.

A session holds turns in order; a turn holds the messages it produced (assistant messages and
tool results, a ``partial`` flag on cut-off ones) and its tool calls with their latest state;
a session also holds an append-only event log whose sequence numbers run 1, 2, 3… without
gaps, which is what a client replays a stream from. Text still streaming is kept as appended
deltas (``partial_text``) and folded into one message row when its message ends, so an n-byte
answer costs O(n) bytes written.

Every backend (SQLite, PostgreSQL) implements :class:`Store` and passes the same conformance
suite (``tests/store/``). The store persists what it is given: the journal and the
runner redact before they write.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import groupby
from types import TracebackType
from typing import Any, Protocol, Self

from drover.errors import LeaseLostError
from drover.events import MAY_HAVE_RUN_TEXT as MAY_HAVE_RUN_TEXT
from drover.events import NOT_RUN_TEXT as NOT_RUN_TEXT
from drover.events import READ_ONLY_CUT_TEXT as READ_ONLY_CUT_TEXT
from drover.events import TextDelta, ToolState, TurnStatus, event_to_dict, interrupted_outcome
from drover.messages import Message, TextBlock, Usage

#: Why a recovered turn ended.
ORPHAN_ERROR = "the process running this turn stopped before it finished"


TITLE_CHARS = 80


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionRecord:
    id: str
    created_at: float
    updated_at: float
    workdir: str
    model: str
    #: The first user prompt, cut to :data:`TITLE_CHARS` characters.
    title: str | None
    #: Who the session belongs to (the server's hash of a client token), or None.
    owner: str | None = None


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

    #: For an event a store logged on its own and returned (:meth:`TurnJournal.end_turn`):
    #: the number of the event before it in the log. None when not known (a replay derives it
    #: from the order of the log).
    prev: int | None = None

    @property
    def end_seq(self) -> int:
        return max(self.seq, self.last_seq)


class SessionStore(Protocol):
    """Sessions and what they hold, read back: the seam of transcripts and history."""

    async def create_session(
        self,
        *,
        session_id: str | None = None,
        workdir: str,
        model: str,
        owner: str | None = None,
    ) -> SessionRecord: ...

    async def get_session(self, session_id: str) -> SessionRecord | None: ...

    async def list_sessions(
        self, limit: int = 50, *, owner: str | None = None
    ) -> list[SessionRecord]:
        """Most recently updated first; with ``owner``, only that owner's sessions."""
        ...

    async def latest_session(self, workdir: str) -> SessionRecord | None: ...

    async def set_session_model(self, session_id: str, model: str) -> None: ...

    async def turns(self, session_id: str) -> list[TurnRecord]: ...

    async def get_turn(self, turn_id: str) -> TurnRecord | None: ...

    async def last_turn(self, session_id: str) -> TurnRecord | None:
        """The session's latest turn (None: it has none)."""
        ...

    async def turn_messages(self, turn_id: str) -> list[StoredMessage]:
        """The turn's messages in order, then one partial message per step whose deltas were
        never folded into a message."""
        ...

    async def turns_with_messages(
        self, session_id: str
    ) -> list[tuple[TurnRecord, list[StoredMessage]]]:
        """:meth:`turns`, each with its :meth:`turn_messages`, read in one snapshot."""
        ...

    async def tool_calls(
        self, turn_id: str | None = None, *, session_id: str | None = None
    ) -> list[ToolCallRecord]:
        """The calls of one turn, or of a whole session, in turn, step and call order."""
        ...

    async def find_sessions(self, prefix: str, limit: int = 10) -> list[SessionRecord]:
        """The sessions whose id starts with ``prefix``, in id order, at most ``limit`` (an
        index serves it): how a front door finds the session of an id the user shortened."""
        ...

    async def rename_session(self, session_id: str, title: str) -> None:
        """Set the session's title (kept: later turns do not replace it); ``StoreError``
        when there is no such session."""
        ...

    async def delete_session(self, session_id: str) -> bool:
        """Delete the session and everything it holds — turns, messages, tool calls, streamed
        text, events, grants — in one transaction; False when there was no such session.

        Raises :class:`~drover.errors.SessionBusyError` while a turn of the session is
        ``running`` (checked in the same transaction; a turn a dead process left running is
        recovered first, :meth:`TurnLeases.recover_orphans`)."""
        ...

    async def running_usage(self, session_id: str, turn_id: str) -> Usage | None:
        """What a running turn has used so far, as its last ``usage`` event says (None: no
        model call of it has reported yet). Read from the end of the log back to the turn's
        first row only."""
        ...


class TurnLeases(Protocol):
    """Who runs which turn: starting one, holding it, and taking back the abandoned."""

    async def begin_turn(
        self, session_id: str, user_message: Message | None, owner: str, lease_seconds: float
    ) -> TurnRecord:
        """A new ``running`` turn at the end of the session, leased to ``owner``.

        Raises :class:`~drover.errors.SessionBusyError` when a turn of the session is still
        ``running`` (checked and created atomically: never two running turns in a session).
        """
        ...

    async def renew_lease(self, turn_id: str, owner: str, lease_seconds: float) -> bool:
        """Extend the lease; False when the turn is no longer running under ``owner``."""
        ...

    async def discard_pending(self, session_id: str) -> list[str]:
        """Mark the unfinished turns after the last completed one discarded; their ids."""
        ...

    async def recover_orphans(
        self, is_alive: Callable[[str], bool] | None = None, *, session_id: str | None = None
    ) -> list[str]:
        """Interrupt ``running`` turns whose lease expired or whose owner is dead (with
        ``session_id``, only that session's: a turn start must not end other sessions' turns,
        which their takeover resumes).

        Their open tool calls become ``interrupted`` (``outcome_unknown`` when a side-effecting
        call was running), their text deltas a partial message, and the event log gets the
        matching ``tool_state``/``assistant_message`` events and a terminal event. A turn whose
        lease holds and whose owner lives is never touched. ``is_alive`` defaults to
        :func:`owner_alive`. Returns the recovered turn ids.
        """
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class GrantRecord:
    """A permission the user granted "always" in one session."""

    session_id: str
    #: What it allows: a tool's name (every call of that tool).
    rule: str
    created_at: float


class PermissionGrants(Protocol):
    """What a session's user allowed "always", kept with the session (every process and
    every restart sees it)."""

    async def add_grant(self, session_id: str, rule: str) -> None:
        """Record the grant (a grant already recorded stays as it is)."""
        ...

    async def grants(self, session_id: str) -> list[GrantRecord]:
        """The session's grants, oldest first."""
        ...

    async def revoke_grants(self, session_id: str, rule: str | None = None) -> list[str]:
        """Remove one grant (``rule``) or all of them; the rules removed."""
        ...


class TurnJournal(Protocol):
    """The writes that record a running turn as it happens (what a
    :class:`~drover.store.journal.Journal` writes through). Only a ``running`` turn takes
    more work (:class:`~drover.errors.LeaseLostError` otherwise)."""

    async def append_message(
        self, turn_id: str, message: Message, *, partial: bool = False, step: int | None = None
    ) -> int:
        """Append a message; with ``step``, drop that step's text deltas in the same write
        (the message supersedes them). Returns the message's seq in the turn."""
        ...

    async def append_partial_text(
        self,
        turn_id: str,
        step: int,
        block_index: int,
        text: str,
        *,
        seq: int | None = None,
        last_seq: int | None = None,
        marks: Sequence[tuple[int, int]] | None = None,
    ) -> int:
        """Append streamed text; the session's log shows it from this write on as a coalesced
        ``text_delta`` event (``{"type", "text", "index", "step"}``); returns its seq. With
        ``seq`` the row covers the numbers ``seq..last_seq`` and keeps the live deltas'
        ``marks`` (see :class:`EventRecord`)."""
        ...

    async def discard_partial_text(self, turn_id: str, step: int) -> None:
        """Drop a step's text deltas from what recovery would keep (its stream is being
        retried); the log keeps showing them, before the retry's row."""
        ...

    async def upsert_tool_call(
        self,
        turn_id: str,
        call_id: str,
        *,
        call_index: int,
        name: str,
        state: ToolState,
        input: Mapping[str, Any] | None = None,
        output: str | None = None,
        is_error: bool = False,
        outcome_unknown: bool = False,
        read_only: bool = False,
        step: int = 0,
    ) -> None:
        """Create or move a tool call; a None ``input``/``output`` keeps the stored one."""
        ...

    async def append_event(
        self,
        session_id: str,
        turn_id: str | None,
        event: Mapping[str, Any],
        *,
        seq: int | None = None,
        last_seq: int | None = None,
    ) -> int:
        """Append ``event`` (``events.event_to_dict`` form) and return its seq: ``seq`` when
        given (a number the journal handed out; the row covers ``seq..last_seq``), else the
        next after every number used or reserved."""
        ...

    async def end_turn(
        self,
        turn_id: str,
        status: TurnStatus,
        *,
        reason: str | None = None,
        error: str | None = None,
        usage: Usage | None = None,
        owner: str | None = None,
        event: Mapping[str, Any] | None = None,
        first_seq: int | None = None,
    ) -> list[EventRecord]:
        """Record how the turn ended. Tool calls still open become ``interrupted`` and left-over
        text deltas become a partial message, so nothing stays "in progress"; ``event`` (the
        turn's terminal event) is logged in the same transaction, so a turn never ends without
        it or logs it without ending. Returns the events this logged (the terminal one last),
        numbered from ``first_seq`` (the journal, the log's only writer while it holds the
        lease, passes its next number) or else after every number used or reserved; each
        record's ``prev`` is the number before it in the log. With ``first_seq`` the
        session's reservation (:meth:`EventLog.reserve_seqs`) shrinks to the last number
        logged, in the same transaction: the journal hands out no number after its turn's end.

        Only a ``running`` turn can end, and with ``owner`` only while ``owner`` holds it:
        otherwise :class:`~drover.errors.LeaseLostError` (another process recovered it)."""
        ...


class EventLog(Protocol):
    """Reading and numbering a session's event log (what a stream replays)."""

    async def events_after(
        self, session_id: str, after_seq: int = 0, limit: int | None = None
    ) -> list[EventRecord]:
        """The rows that cover any number above ``after_seq``, in ``seq`` order."""
        ...

    async def last_event_seq(self, session_id: str) -> int:
        """The highest number any row of the session's log covers (0: none)."""
        ...

    async def next_event_seq(self, session_id: str) -> int:
        """The first number after every one used or reserved in the session's log."""
        ...

    async def log_bounds(self, session_id: str) -> tuple[int, int]:
        """:meth:`last_event_seq` and :meth:`next_event_seq`, read together."""
        ...

    async def reserve_seqs(
        self,
        session_id: str,
        upto: int,
        *,
        turn_id: str | None = None,
        owner: str | None = None,
    ) -> None:
        """Record durably that numbers up to ``upto`` may have been handed out: after a crash,
        new events are numbered above it, so a client holding a number that did not survive
        is told to reset instead of skipping events. A reservation only grows (the end of the
        turn that made it shrinks it to the numbers used, see :meth:`TurnJournal.end_turn`).

        With ``turn_id``, only while that turn is running — and, with ``owner``, held by
        ``owner`` — as any other write of a turn: :class:`~drover.errors.LeaseLostError`
        otherwise (a process past its lease cannot move the numbering of the one that took
        the session over)."""
        ...


class Store(SessionStore, PermissionGrants, TurnLeases, TurnJournal, EventLog, Protocol):
    """The durable record of sessions, turns, messages, tool calls and events.

    Writes are atomic; one that has started completes even if the awaiting task is cancelled.
    Errors are :class:`~drover.errors.StoreError` with a one-line message.
    """

    async def open(self) -> None:
        """Connect and bring the schema up to date (idempotent)."""

    async def close(self) -> None: ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None: ...


# -- rules every backend shares ---------------------------------------------------------------


def interrupted_call(state: ToolState, read_only: bool) -> tuple[str, bool]:
    """What an open tool call becomes when its turn is cut off: (result text, outcome unknown).
    One stored as ``running`` had its tool entered (:func:`~drover.events.interrupted_outcome`)."""
    return interrupted_outcome(state == "running", read_only)


def check_writable(turn_id: str, status: str, holder: str | None, owner: str | None) -> None:
    """Refuse a write to a turn that ended (or, with ``owner``, that another process holds)."""
    if status != "running":
        raise LeaseLostError(
            f"turn {turn_id} has already ended ({status}); another process may have recovered it"
        )
    if owner is not None and holder != owner:
        raise LeaseLostError(f"turn {turn_id} is held by another process ({holder})")


def partial_messages(deltas: Iterable[tuple[int, int, str]]) -> list[Message]:
    """The assistant messages rebuilt from text deltas ``(step, block_index, text)`` in
    order: one per step that holds text, its blocks marked partial."""
    out: list[Message] = []
    for _, rows in groupby(deltas, key=lambda d: d[0]):
        joined: dict[int, list[str]] = {}
        for _, index, text in rows:
            joined.setdefault(index, []).append(text)
        content = tuple(
            TextBlock(text=text, partial=True)
            for _, parts in sorted(joined.items())
            if (text := "".join(parts))
        )
        if content:
            out.append(Message(role="assistant", content=content))
    return out


def session_title(user_message: Message | None) -> str | None:
    if user_message is None:
        return None
    text = " ".join(user_message.text.split())
    if not text:
        return None
    return text if len(text) <= TITLE_CHARS else text[: TITLE_CHARS - 1] + "…"


#: The longest title a user may give a session.
MAX_TITLE_CHARS = 200


def user_title(text: str) -> str:
    """A title the user gave, on one line; ``ValueError`` (its message says why) when it is
    empty or longer than :data:`MAX_TITLE_CHARS`."""
    title = " ".join(text.split())
    if not title:
        raise ValueError("a title cannot be empty")
    if len(title) > MAX_TITLE_CHARS:
        raise ValueError(f"a title is at most {MAX_TITLE_CHARS} characters ({len(title)} given)")
    return title


def flushed_text_event(text: str, index: int, step: int) -> dict[str, Any]:
    """The coalesced ``text_delta`` event a flush of streamed text logs: the live delta's form
    and the step it belongs to (a replay drops a step's text on a discarding retry)."""
    return {**event_to_dict(TextDelta(text=text, index=index)), "step": step}


def logged_event(
    session_id: str, seq: int, turn_id: str | None, event: Mapping[str, Any], now: float
) -> EventRecord:
    """The record of an event a store just logged on its own (one number)."""
    payload = dict(event)
    return EventRecord(
        session_id=session_id,
        seq=seq,
        turn_id=turn_id,
        type=str(payload["type"]),
        payload=payload,
        created_at=now,
        last_seq=seq,
    )


# -- who runs a turn: ``host:pid:start`` -------------------------------------------------------


def _stat_fields(pid: int) -> list[str]:
    """The fields of ``/proc/<pid>/stat`` after the command name (which may hold spaces and
    parentheses): ``[0]`` the state, ``[19]`` the start time in clock ticks since boot."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        return f.read().rsplit(")", 1)[1].split()


def owner_id() -> str:
    """Identifies this process: host, pid and start time (so a reused pid is not mistaken)."""
    try:
        start = _stat_fields(os.getpid())[19]
    except (OSError, IndexError):
        start = str(int(time.time()))
    import socket  # here: the journal's readers (drover sessions, drover show) never need it

    return f"{socket.gethostname()}:{os.getpid()}:{start}"


def owner_alive(owner: str) -> bool:
    """Whether the process an owner id (:func:`owner_id`) names may still be running.

    A local owner is dead when its pid is gone, a zombie, or reused by a process that started
    at another time. Owners on other hosts count as alive: their lease decides.
    """
    parts = owner.rsplit(":", 2)
    if len(parts) != 3:
        return True
    host, pid_text, start = parts
    import socket

    if host != socket.gethostname():
        return True
    try:
        pid = int(pid_text)
    except ValueError:
        return True
    if pid <= 0:
        return False
    if os.path.isdir("/proc/self"):
        try:
            fields = _stat_fields(pid)
        except FileNotFoundError:
            return False
        except (OSError, IndexError):
            pass
        else:
            return len(fields) > 19 and fields[0] not in ("Z", "X") and fields[19] == start
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
