"""The journal's seams: the narrow store protocols a backend implements.

Each user takes the protocol of what it uses — :class:`SessionStore` (sessions and what they
hold), :class:`TurnLeases` (starting, holding and recovering turns), :class:`PermissionGrants`
(what a session's user allowed "always"), :class:`MessageQueue` (messages waiting for a turn to
end), :class:`TurnJournal` (the writes that record a
running turn) and :class:`EventLog` (reading and numbering the log) — and :class:`Store`, all
of them with a lifecycle, is what a backend implements. The records they give back are in
:mod:`drover.journal.records`; the writes, as values, in :mod:`drover.journal.writes`.

Text still streaming is kept as appended deltas (``partial_text``) and folded into one message
row when its message ends, so an n-byte answer costs O(n) bytes written.

Every backend (SQLite, PostgreSQL) implements :class:`Store` and passes the same conformance
suite (``tests/store/``). The store persists what it is given: the journal and the
runner redact before they write.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from types import TracebackType
from typing import Any, Protocol, Self

from drover.core.messages import Message, Usage
from drover.journal.records import (
    Delivery,
    EventRecord,
    FileImageRecord,
    GrantRecord,
    PruneBatch,
    QueuedMessage,
    SessionRecord,
    StoredMessage,
    ToolCallRecord,
    Transcript,
    TurnRecord,
)
from drover.journal.writes import JournalWrite


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

    async def open_session(
        self, session_id: str, *, workdir: str, model: str, owner: str | None = None
    ) -> tuple[SessionRecord, bool]:
        """The session ``session_id`` (an id a client chose), made with these fields when
        none is stored — in one transaction, the owner with it — and whether it was made now:
        callers racing to make one id all get the one session, and see its real owner."""
        ...

    async def get_session(self, session_id: str) -> SessionRecord | None: ...

    async def list_sessions(
        self, limit: int = 50, *, owner: str | None = None
    ) -> list[SessionRecord]:
        """Most recently updated first; with ``owner``, only that owner's sessions."""
        ...

    async def latest_session(self, workdir: str) -> SessionRecord | None: ...

    async def set_session_model(self, session_id: str, model: str) -> None: ...

    async def find_sessions(self, prefix: str, limit: int = 10) -> list[SessionRecord]:
        """The sessions whose id starts with ``prefix``, in id order, at most ``limit`` (an
        index serves it): how a front door finds the session of an id the user shortened."""
        ...

    async def rename_session(self, session_id: str, title: str) -> None:
        """Set the session's title (kept: later turns do not replace it); ``StoreError``
        when there is no such session."""
        ...

    async def delete_session(self, session_id: str) -> bool:
        """Delete the session and everything it holds (turns, messages, tool calls, streamed
        text, events, grants) in one transaction; False when there was no such session.

        Raises :class:`~drover.errors.SessionBusyError` while a turn of the session is
        ``running`` (checked in the same transaction; a turn a dead process left running is
        recovered first)."""
        ...

    async def running_usage(self, session_id: str, turn_id: str) -> Usage | None:
        """What a running turn has used so far, as its last ``usage`` event says (None: no
        model call of it has reported yet). Read from the end of the log back to the turn's
        first row only."""
        ...

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

    async def transcript(self, session_id: str) -> Transcript | None:
        """The session, its turns with their messages, its tool calls, its queued messages
        and its log's last number, read together: current to exactly that number (None: no
        such session)."""
        ...


class TurnLeases(Protocol):
    """Who runs which turn: starting one, holding it, and taking back the abandoned."""

    async def begin_turn(
        self,
        session_id: str,
        user_message: Message | None,
        owner: str,
        lease_seconds: float,
        *,
        webhook: str | None = None,
        claim: str | None = None,
        hold: str | None = None,
    ) -> TurnRecord:
        """A new ``running`` turn at the end of the session, leased to ``owner``. With
        ``webhook`` (a URL), whatever ends the turn also writes its announcement to the
        outbox, in the same transaction (see :class:`WebhookOutbox`).

        Raises :class:`~drover.errors.SessionBusyError` when a turn of the session is still
        ``running`` (checked and created atomically: never two running turns in a session),
        and :class:`~drover.errors.SessionHeldError` while a live hold of the session
        (:meth:`hold_session`) is not ``hold``'s; a hold of ``hold``'s ends as the turn starts.
        With ``claim`` the turn runs that queued message: it must be the session's next
        queued one, and becomes ``started`` by this turn in the same transaction, else
        :class:`~drover.errors.QueueChangedError` and no turn starts; the webhook the message
        was queued with, if any, replaces ``webhook``.
        """
        ...

    async def hold_session(
        self,
        session_id: str,
        token: str,
        owner: str,
        seconds: float,
        *,
        after: str | None = None,
    ) -> None:
        """Hold the session for ``token`` (``owner``'s, leased for ``seconds``): until it is
        released, every turn start but one given ``token`` is refused, in any process. Refused
        with :class:`~drover.errors.SessionBusyError` while a turn of the session runs — but
        the turn ``after``, which the hold is to follow — and with
        :class:`~drover.errors.SessionHeldError` while another live hold is on it. A hold whose
        owner is dead or whose lease ran out counts for nothing; holding again with the same
        token renews it."""
        ...

    async def renew_hold(self, session_id: str, token: str, seconds: float) -> bool:
        """Extend ``token``'s hold; False when it holds the session no more."""
        ...

    async def release_hold(self, session_id: str, token: str) -> None:
        """End ``token``'s hold (nothing when it holds the session no more)."""
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
        :func:`~drover.journal.owners.owner_alive`. Returns the recovered turn ids.
        """
        ...


class MessageQueue(Protocol):
    """Messages posted while a turn of their session ran, waiting to run in order (once each)
    after it: durable, so a crash loses none. A queue's events (``message_queued``,
    ``message_cancelled``) are logged by the store only while no turn of the session runs —
    then the running turn's journal, the log's one writer, logs them."""

    async def enqueue_message(
        self, session_id: str, content: str, *, webhook: str | None = None
    ) -> tuple[QueuedMessage, str | None, EventRecord | None]:
        """Queue ``content`` after the session's other queued messages, with the ``webhook``
        its turn's end is announced to (see :meth:`TurnLeases.begin_turn`): the message, the
        id of the turn running on the session (None: none runs) and the ``message_queued``
        event logged (None: a turn runs, the caller has its journal log it)."""
        ...

    async def cancel_queued(
        self, session_id: str, message_id: str
    ) -> tuple[bool, str | None, EventRecord | None]:
        """Cancel a message still queued (the row stays, ``cancelled``): whether it was, and
        the running turn and logged ``message_cancelled`` event as :meth:`enqueue_message`."""
        ...

    async def log_queue_event(
        self, session_id: str, event: dict[str, Any]
    ) -> tuple[str | None, EventRecord | None]:
        """Log a queue's event if no turn of the session runs: ``(None, its record)``, else
        ``(the running turn's id, None)``."""
        ...

    async def queued_messages(self, session_id: str, *, every: bool = False) -> list[QueuedMessage]:
        """The session's messages still queued, in order (``every``: whatever their status)."""
        ...

    async def waiting_sessions(self, limit: int = 100) -> list[str]:
        """Sessions with a queued message and no running turn."""
        ...


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
    :class:`~drover.journal.journal.Journal` writes through): one entry point, taking the
    writes as values (:mod:`drover.journal.writes`)."""

    async def write_batch(self, writes: Sequence[JournalWrite]) -> list[Any]:
        """Make ``writes`` in order in one transaction (all or none); what each one gives
        back, in order (see each write's class). A write that fails rolls the whole batch
        back; one that has started completes even if the awaiting task is cancelled."""
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
        turn that made it shrinks it to the numbers used, see
        :class:`~drover.journal.writes.EndTurn`).

        With ``turn_id``, only while that turn is running — and, with ``owner``, held by
        ``owner`` — as any other write of a turn: :class:`~drover.errors.LeaseLostError`
        otherwise (a process past its lease cannot move the numbering of the one that took
        the session over)."""
        ...


class Retention(Protocol):
    """Pruning old sessions in bounded batches, and the journal's size (see
    :mod:`drover.journal.retention` for the rules)."""

    async def prune_batch(self, cutoff: float, keep_last: int, limit: int) -> PruneBatch:
        """Delete, in one transaction, up to ``limit`` sessions last updated before ``cutoff``
        (oldest first) that are not among the ``keep_last`` most recently updated and have
        no ``running`` turn (checked in that transaction), with everything they hold; and up
        to ``limit`` outbox rows delivered or given up before ``cutoff``."""
        ...

    async def reclaim_space(self, most: int) -> int:
        """Give up to ``most`` pages of free space back to the file system, in one transaction,
        where the backend can (SQLite in incremental mode); the free pages left to give (0:
        none, or the backend cannot)."""
        ...

    async def prune_preview(self, cutoff: float, keep_last: int) -> PruneBatch:
        """What pruning with these settings would delete now; deletes nothing."""
        ...

    async def journal_bytes(self) -> tuple[int, int]:
        """The journal's size in bytes and the part of it that is free space (0: unknown)."""
        ...

    async def vacuum(self) -> None:
        """Rewrite the journal once to return its free space (holds the write lock for the
        rewrite; SQLite also switches an older file to incremental vacuum)."""
        ...


class WebhookOutbox(Protocol):
    """Announcements of turns' ends waiting for delivery (written by whatever ends a turn
    that began with a webhook, in the same transaction)."""

    async def claim_deliveries(
        self, claimer: str, hold_seconds: float, limit: int = 16, *, busy: Collection[str] = ()
    ) -> list[Delivery]:
        """Claim due deliveries for ``hold_seconds``: the oldest of each of up to ``limit``
        receivers (URLs), leaving out those in ``busy`` (the claimer sends to them now). No
        other claimer gets them until the claim is settled or runs out — at once when
        ``claimer`` (a process id, :func:`~drover.journal.owners.owner_id`) is a process of
        this machine that is gone."""
        ...

    async def settle_delivery(
        self, delivery_id: str, claimer: str, *, error: str | None, retry_at: float | None
    ) -> bool:
        """Record an attempt: delivered (``error`` None), to retry at ``retry_at``, or given up
        (``retry_at`` None); False when ``claimer`` no longer held the claim."""
        ...

    async def deliveries(self, turn_id: str | None = None) -> list[dict[str, object]]:
        """The outbox's rows (one turn's, or all), oldest first: id, session_id, turn_id, url,
        attempts, delivered_at, failed_at, last_error."""
        ...


class SessionControl(Protocol):
    """Forks and rewinds: a session copied up to a turn, and turns undone with the files their
    tools wrote (whose content before each write the journal keeps, see
    :class:`~drover.journal.writes.KeepFileImage`)."""

    async def fork_session(
        self, source_id: str, *, turn_id: str | None = None, owner: str | None = None
    ) -> SessionRecord:
        """A new session (owned by ``owner``) whose turns are copies of ``source_id``'s up to
        and including ``turn_id`` (None: every turn not running), with their messages, tool
        calls and file images; its event log starts empty. The new session records the source
        and the last turn copied. ``StoreError`` for an unknown session or turn,
        :class:`~drover.errors.SessionBusyError` when ``turn_id`` is still running."""
        ...

    async def file_images(self, session_id: str, from_seq: int) -> list[FileImageRecord]:
        """The file writes of the session's turns numbered ``from_seq`` or later (rewound ones
        included), in order."""
        ...

    async def file_blob(self, digest: str) -> bytes | None:
        """The content kept under a SHA-256 hex digest (None: none)."""
        ...

    async def rewind_turns(
        self,
        session_id: str,
        turn_id: str,
        restored: Sequence[tuple[str, int]] = (),
        *,
        hold: str | None = None,
        planned: Sequence[str] | None = None,
    ) -> tuple[list[str], EventRecord | None]:
        """Mark ``turn_id`` and every later turn of the session rewound (and discarded:
        history skips them), and the file images ``restored`` (``(turn_id, seq)``) put back,
        and log ``turns_rewound``, in one transaction; the ids of the turns newly rewound and
        the event logged (None when none was). Refused with
        :class:`~drover.errors.SessionBusyError` while a turn of the session runs or another
        than ``hold`` holds it (a hold of ``hold``'s ends here), and with
        :class:`~drover.errors.StoreError` when the turns to mark are not ``planned`` (the
        ids a plan named, in order) — then nothing is marked."""
        ...


class Store(
    SessionStore,
    PermissionGrants,
    TurnLeases,
    MessageQueue,
    TurnJournal,
    EventLog,
    Retention,
    WebhookOutbox,
    SessionControl,
    Protocol,
):
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
