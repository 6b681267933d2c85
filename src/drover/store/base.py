"""The journal's seam: the :class:`Store` protocol, its records, and rules every backend shares.

A session holds turns in order; a turn holds the messages it produced (assistant messages and
tool results, a ``partial`` flag on cut-off ones) and its tool calls with their latest state;
a session also holds an append-only event log whose sequence numbers run 1, 2, 3… without
gaps, which is what a client replays a stream from. Text still streaming is kept as appended
deltas (``partial_text``) and folded into one message row when its message ends, so an n-byte
answer costs O(n) bytes written.

Every backend (SQLite now, PostgreSQL later) implements :class:`Store` and passes the same
conformance suite (``tests/store/``). The store persists what it is given: the journal and the
runner redact before they write.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import groupby
from types import TracebackType
from typing import Any, Protocol, Self

from drover.errors import LeaseLostError
from drover.events import ToolState, TurnStatus
from drover.messages import Message, TextBlock, Usage, message_from_dict

#: Result text of a tool call cut off before it started.
NOT_RUN_TEXT = "Interrupted before it ran; it had no effect."
#: Result text of a side-effecting call cut off while running.
MAY_HAVE_RUN_TEXT = (
    "Interrupted while running; it may have had effects (outcome unknown). "
    "Check before repeating it."
)
#: Result text of a read-only call cut off while running.
READ_ONLY_CUT_TEXT = "Interrupted while running; the tool is read-only, so it had no effect."
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

    @property
    def end_seq(self) -> int:
        return max(self.seq, self.last_seq)


class Store(Protocol):
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

    # sessions
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

    # turns
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
        lease, passes its next number) or else after every number used or reserved.

        Only a ``running`` turn can end, and with ``owner`` only while ``owner`` holds it:
        otherwise :class:`~drover.errors.LeaseLostError` (another process recovered it)."""
        ...

    async def turns(self, session_id: str) -> list[TurnRecord]: ...

    async def discard_pending(self, session_id: str) -> list[str]:
        """Mark the unfinished turns after the last completed one discarded; their ids."""
        ...

    async def recover_orphans(self, is_alive: Callable[[str], bool] | None = None) -> list[str]:
        """Interrupt ``running`` turns whose lease expired or whose owner is dead.

        Their open tool calls become ``interrupted`` (``outcome_unknown`` when a side-effecting
        call was running), their text deltas a partial message, and the event log gets the
        matching ``tool_state``/``assistant_message`` events and a terminal event. A turn whose
        lease holds and whose owner lives is never touched. ``is_alive`` defaults to
        :func:`owner_alive`. Returns the recovered turn ids.
        """
        ...

    # the turn's work: only a ``running`` turn takes more (LeaseLostError otherwise)
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
        """Append streamed text, and in the same write a coalesced ``text_delta`` event
        (``{"type", "text", "index", "step"}``) to the session's log; returns its seq. With
        ``seq`` the row covers the numbers ``seq..last_seq`` and keeps the live deltas'
        ``marks`` (see :class:`EventRecord`)."""
        ...

    async def discard_partial_text(self, turn_id: str, step: int) -> None:
        """Drop a step's text deltas (its stream is being retried)."""
        ...

    async def turn_messages(self, turn_id: str) -> list[StoredMessage]:
        """The turn's messages in order, then one partial message per step whose deltas were
        never folded into a message."""
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

    async def tool_calls(
        self, turn_id: str | None = None, *, session_id: str | None = None
    ) -> list[ToolCallRecord]:
        """The calls of one turn, or of a whole session, in turn, step and call order."""
        ...

    # the event log
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

    async def reserve_seqs(self, session_id: str, upto: int) -> None:
        """Record durably that numbers up to ``upto`` may have been handed out (replacing the
        previous reservation): after a crash, new events are numbered above it, so a client
        holding a number that did not survive is told to reset instead of skipping events."""
        ...


# -- rules every backend shares ---------------------------------------------------------------


def interrupted_call(state: ToolState, read_only: bool) -> tuple[str, bool]:
    """What an open tool call becomes when its turn is cut off: (result text, outcome unknown)."""
    if state == "running":
        return (READ_ONLY_CUT_TEXT, False) if read_only else (MAY_HAVE_RUN_TEXT, True)
    return NOT_RUN_TEXT, False


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


def owner_alive(owner: str) -> bool:
    """Whether the process an owner id (``host:pid:start``) names may still be running.

    A local owner is dead when its pid is gone, a zombie, or reused by a process that started
    at another time. Owners on other hosts count as alive: their lease decides.
    """
    parts = owner.rsplit(":", 2)
    if len(parts) != 3:
        return True
    host, pid_text, start = parts
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
            with open(f"/proc/{pid}/stat", encoding="ascii") as f:
                fields = f.read().rsplit(")", 1)[1].split()
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


def interrupted_call_event(
    call_id: str, call_index: int, name: str, output: str, outcome_unknown: bool
) -> dict[str, Any]:
    """The ``tool_state`` event logged when a store closes an open call."""
    event: dict[str, Any] = {
        "type": "tool_state",
        "call_id": call_id,
        "call_index": call_index,
        "name": name,
        "state": "interrupted",
        "output": output,
        "is_error": True,
    }
    if outcome_unknown:
        event["outcome_unknown"] = True
    return event


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


def orphan_end_event(worked: bool) -> dict[str, Any]:
    """The terminal event logged for a recovered turn (``incomplete`` when it holds work)."""
    return {
        "type": "incomplete" if worked else "error",
        "reason": "interrupted",
        "error": ORPHAN_ERROR,
        "usage": Usage(partial=True).to_dict(),
    }


# -- rows to records (a row is anything indexable by column name) ------------------------------


class Row(Protocol):
    def __getitem__(self, key: str, /) -> Any: ...


def _json(value: Any) -> Any:
    """A JSON column's value: text in SQLite, already decoded from a PostgreSQL ``jsonb``."""
    return json.loads(value) if isinstance(value, str | bytes) else value


def session_from_row(row: Row) -> SessionRecord:
    return SessionRecord(
        id=str(row["id"]),
        created_at=float(row["created_at"]),
        updated_at=float(row["updated_at"]),
        workdir=str(row["workdir"]),
        model=str(row["model"]),
        title=row["title"],
        owner=row["owner"],
    )


def turn_from_row(row: Row) -> TurnRecord:
    user, usage = row["user_message"], row["usage"]
    return TurnRecord(
        id=str(row["id"]),
        session_id=str(row["session_id"]),
        seq=int(row["seq"]),
        status=row["status"],
        user_message=None if user is None else message_from_dict(_json(user)),
        reason=row["reason"],
        error=row["error"],
        usage=None if usage is None else Usage.from_dict(_json(usage)),
        owner=row["owner"],
        lease_expires_at=row["lease_expires_at"],
        discarded=bool(row["discarded"]),
        created_at=float(row["created_at"]),
        updated_at=float(row["updated_at"]),
        ended_at=row["ended_at"],
    )


def tool_call_from_row(row: Row) -> ToolCallRecord:
    raw_input = row["input"]
    return ToolCallRecord(
        turn_id=str(row["turn_id"]),
        call_id=str(row["call_id"]),
        step=int(row["step"]),
        call_index=int(row["call_index"]),
        name=str(row["name"]),
        state=row["state"],
        input=None if raw_input is None else _json(raw_input),
        output=row["output"],
        is_error=bool(row["is_error"]),
        outcome_unknown=bool(row["outcome_unknown"]),
        read_only=bool(row["read_only"]),
        created_at=float(row["created_at"]),
        updated_at=float(row["updated_at"]),
    )


def stored_message_from_row(row: Row) -> StoredMessage:
    return StoredMessage(
        turn_id=str(row["turn_id"]),
        seq=int(row["seq"]),
        message=message_from_dict(_json(row["body"])),
        partial=bool(row["partial"]),
        created_at=float(row["created_at"]),
    )


def event_from_row(row: Row) -> EventRecord:
    seq = int(row["seq"])
    return EventRecord(
        session_id=str(row["session_id"]),
        seq=seq,
        turn_id=row["turn_id"],
        type=str(row["type"]),
        payload=_json(row["payload"]),
        created_at=float(row["created_at"]),
        last_seq=max(seq, int(row["last_seq"] or 0)),
        marks=decode_marks(seq, row["marks"]),
    )


def encode_marks(seq: int, marks: Sequence[tuple[int, int]] | None) -> str | None:
    """Marks as a compact JSON list of differences (a 10-byte delta costs ~5 bytes)."""
    if marks is None:
        return None
    flat: list[int] = []
    prev_seq, prev_end = seq, 0
    for mark_seq, end in marks:
        flat += (mark_seq - prev_seq, end - prev_end)
        prev_seq, prev_end = mark_seq, end
    return json.dumps(flat, separators=(",", ":"))


def decode_marks(seq: int, raw: Any) -> tuple[tuple[int, int], ...] | None:
    if raw is None:
        return None
    flat = _json(raw)
    out: list[tuple[int, int]] = []
    prev_seq, prev_end = seq, 0
    for i in range(0, len(flat) - 1, 2):
        prev_seq, prev_end = prev_seq + int(flat[i]), prev_end + int(flat[i + 1])
        out.append((prev_seq, prev_end))
    return tuple(out)
