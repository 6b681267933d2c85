"""The SQL event log, and the plumbing every SQL plan of the store runs on.

:class:`SqlLog` holds what the rest of :class:`~drover.store.sql_store.SqlStore` builds on: the
backend's :meth:`SqlLog._perform` (which drives a plan of :mod:`drover.store.dialect` in one of
four modes: ``read``, no transaction; ``write``, one short write transaction; ``bulk``, a write
transaction of many bytes, which a backend keeps off its caller's thread; ``snapshot``, one
consistent read), the session lock every write takes first, and the event log.

A session's log numbers its events 1, 2, 3… without gaps; a coalesced text row covers the
numbers of the live deltas it holds. A number the journal handed out is kept; a row the store
logs on its own (settling, recovery) is numbered after every number used *or reserved*, so it
never takes a number a client may already hold (see :mod:`drover.journal.numbering`).
"""

from __future__ import annotations

import functools
import heapq
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from types import TracebackType
from typing import Any, Literal, Self, TypeAlias, TypeVar

from drover.errors import StoreError
from drover.journal.fold import TEXT_AT, resolved
from drover.journal.records import EventRecord
from drover.journal.writes import MESSAGE_OF, TEXT_OF, AppendEvent
from drover.messages import Message, message_from_dict, message_to_dict
from drover.store.dialect import Dialect, Exec, Plan, Row, rows
from drover.store.rows import event_from_row, json_value, partial_text_record

T = TypeVar("T")
Mode: TypeAlias = Literal["read", "write", "bulk", "snapshot"]


_EVENT_ROW = "(?, ?, ?, ?::text, ?, ?::jsonb, ?, ?, ?)"
_INSERT_EVENTS = (
    "INSERT INTO events (session_id, seq, part, turn_id, type, payload, created_at, last_seq, "
    "marks) VALUES "
)
_INSERT_EVENT = _INSERT_EVENTS + _EVENT_ROW
#: The most log rows one statement inserts: nine parameters each, under the 999 of an old
#: SQLite.
ROWS_PER_INSERT = 100


@functools.cache
def _insert_events(n: int) -> str:
    """The statement that logs ``n`` rows."""
    return _INSERT_EVENTS + ", ".join([_EVENT_ROW] * n)


def first_value(found: list[Row], column: str) -> Any:
    return found[0][column]


class Held:
    """What one write transaction has locked and checked already — sessions, and running
    turns (with the owner they were checked under) to their session — so that the writes of a
    batch lock and check each once. A plan given none checks for itself."""

    __slots__ = ("sessions", "turns")

    def __init__(self) -> None:
        self.sessions: set[str] = set()
        self.turns: dict[tuple[str, str | None], str] = {}

    def forget_turn(self, turn_id: str) -> None:
        """The turn ended in this transaction: a later write must check it again (and fail)."""
        for key in [k for k in self.turns if k[0] == turn_id]:
            del self.turns[key]


class SqlLog:
    dialect: Dialect
    _clock: Callable[[], float]

    async def open(self) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def _perform(self, plan: Plan[T], mode: Mode) -> T:
        raise NotImplementedError

    async def _select(self, sql: str, *params: Any) -> list[Row]:
        return await self._perform(rows(sql, *params), "read")

    # -- locks ---------------------------------------------------------------------------------

    def _lock_session(self, session_id: str) -> Plan[bool]:
        found = yield from rows(
            f"SELECT 1 AS one FROM sessions s WHERE s.id = ?{self.dialect.lock}", session_id
        )
        return bool(found)

    def _need_session(self, session_id: str, held: Held | None = None) -> Plan[None]:
        if held is not None and session_id in held.sessions:
            return
        if not (yield from self._lock_session(session_id)):
            raise StoreError(f"no session {session_id}")
        if held is not None:
            held.sessions.add(session_id)

    # -- the event log's writes ----------------------------------------------------------------

    def _last_seq_sql(self) -> str:
        """The greatest number the session's log holds, its streaming tail included."""
        return (
            f"{self.dialect.greatest}(COALESCE((SELECT MAX(last_seq) FROM events "
            "WHERE session_id = ?), 0), COALESCE((SELECT MAX(last_seq) FROM partial_text "
            "WHERE session_id = ?), 0))"
        )

    def _next_event_seq(self, session_id: str) -> Plan[int]:
        found = yield from rows(
            f"SELECT {self.dialect.greatest}({self._last_seq_sql()}, COALESCE((SELECT "
            "seq_reserved FROM sessions WHERE id = ?), 0)) + 1 AS n",
            session_id,
            session_id,
            session_id,
        )
        return int(first_value(found, "n"))

    def _log(
        self,
        session_id: str,
        turn_id: str | None,
        event: Mapping[str, Any],
        now: float,
        seq: int | None = None,
        last_seq: int | None = None,
        marks: str | None = None,
        part: int = 0,
    ) -> Plan[int]:
        """Log one row; numbered after every number used or reserved unless ``seq`` is given."""
        if seq is None:
            seq = yield from self._next_event_seq(session_id)
        # Yielded as is (not through ``execute``): the store makes one for every log row.
        yield Exec(
            _INSERT_EVENT, self._row(session_id, turn_id, event, now, seq, last_seq, marks, part)
        )
        return seq

    def _row(
        self,
        session_id: str,
        turn_id: str | None,
        event: Mapping[str, Any],
        now: float,
        seq: int,
        last_seq: int | None,
        marks: str | None,
        part: int,
    ) -> tuple[Any, ...]:
        """The parameters of a log row numbered ``seq``."""
        body = event if type(event) is dict else dict(event)
        end = seq if last_seq is None or last_seq < seq else last_seq
        kind = str(event["type"])
        return (session_id, seq, part, turn_id, kind, self.dialect.json(body), now, end, marks)

    def _log_text(
        self,
        session_id: str,
        turn_id: str,
        event: Mapping[str, Any],
        now: float,
        first: int | None,
        last_seq: int | None,
        marks: str | None,
    ) -> Plan[int]:
        """A coalesced text row; one that starts inside a delta an earlier row began shares that
        row's first number and takes the next ``part``."""
        part = 0
        if first is not None:
            found = yield from rows(
                "SELECT COUNT(*) AS n FROM events WHERE session_id = ? AND seq = ?",
                session_id,
                first,
            )
            part = int(first_value(found, "n"))
        return (yield from self._log(session_id, turn_id, event, now, first, last_seq, marks, part))

    # -- the event log -------------------------------------------------------------------------

    def _append_event(self, w: AppendEvent, now: float, held: Held | None = None) -> Plan[int]:
        if "type" not in w.event:
            raise ValueError("an event needs a type")
        yield from self._need_session(w.session_id, held)
        return (yield from self._log(w.session_id, w.turn_id, w.event, now, w.seq, w.last_seq))

    def _append_numbered(
        self, writes: Sequence[AppendEvent], now: float, held: Held | None = None
    ) -> Plan[list[int]]:
        """Log rows the journal numbered (each ``seq`` given) as :meth:`_append_event` does
        one by one, in one statement for up to :data:`ROWS_PER_INSERT` of them; their
        numbers."""
        seqs: list[int] = []
        for w in writes:
            if "type" not in w.event:
                raise ValueError("an event needs a type")
            if w.seq is None:
                raise ValueError("rows logged together are numbered")
            yield from self._need_session(w.session_id, held)
            seqs.append(w.seq)
        for start in range(0, len(writes), ROWS_PER_INSERT):
            chunk = writes[start : start + ROWS_PER_INSERT]
            params: list[Any] = []
            for w, seq in zip(chunk, seqs[start : start + ROWS_PER_INSERT], strict=True):
                params += self._row(w.session_id, w.turn_id, w.event, now, seq, w.last_seq, None, 0)
            yield Exec(_insert_events(len(chunk)), tuple(params))
        return seqs

    async def last_event_seq(self, session_id: str) -> int:
        found = await self._select(f"SELECT {self._last_seq_sql()} AS seq", session_id, session_id)
        return int(first_value(found, "seq"))

    async def next_event_seq(self, session_id: str) -> int:
        return await self._perform(self._next_event_seq(session_id), "read")

    async def log_bounds(self, session_id: str) -> tuple[int, int]:
        found = await self._select(
            f"SELECT b.last AS last, {self.dialect.greatest}(b.last, COALESCE((SELECT "
            "seq_reserved FROM sessions WHERE id = ?), 0)) + 1 AS n "
            f"FROM (SELECT {self._last_seq_sql()} AS last) b",
            session_id,
            session_id,
            session_id,
        )
        return int(first_value(found, "last")), int(first_value(found, "n"))

    async def events_after(
        self, session_id: str, after_seq: int = 0, limit: int | None = None
    ) -> list[EventRecord]:
        most = self.dialect.no_limit if limit is None else limit

        def read() -> Plan[list[EventRecord]]:
            found = yield from rows(
                "SELECT * FROM events WHERE session_id = ? AND last_seq > ? "
                "ORDER BY seq, part LIMIT ?",
                session_id,
                after_seq,
                most,
            )
            tail = yield from rows(
                "SELECT * FROM partial_text WHERE session_id = ? AND last_seq > ? "
                "ORDER BY id LIMIT ?",
                session_id,
                after_seq,
                most,
            )
            records = [event_from_row(r) for r in found]
            if tail:  # a step still streams: its rows go in number order among the others
                streaming = [partial_text_record(r) for r in tail]
                records = list(heapq.merge(records, streaming, key=lambda r: r.seq))
                del records[len(records) if limit is None else limit :]
            return (yield from self._resolved(records))

        # One snapshot for both tables: a step's rows moving into ``events`` in between would
        # otherwise show twice or not at all.
        return await self._perform(read(), "snapshot")

    def _resolved(self, records: list[EventRecord]) -> Plan[list[EventRecord]]:
        """Rows stored with a reference to a message of their turn, as the log always showed
        them: ``text_of`` (a terminal event's answer), ``message_of`` (the message an
        ``assistant_message``/``tool_results`` event carries), ``text_at`` (a folded text
        row's text). One read of the messages per turn referred to."""
        bodies: dict[str, dict[int, Message]] = {}
        out: list[EventRecord] = []
        for record in records:
            payload = record.payload
            turn_id = record.turn_id
            if turn_id is None or not (
                TEXT_OF in payload or MESSAGE_OF in payload or TEXT_AT in payload
            ):
                out.append(record)
                continue
            if turn_id not in bodies:
                found = yield from rows("SELECT seq, body FROM messages WHERE turn_id = ?", turn_id)
                bodies[turn_id] = {
                    int(r["seq"]): message_from_dict(json_value(r["body"])) for r in found
                }
            messages = bodies[turn_id]
            if TEXT_AT in payload:
                ref = payload[TEXT_AT]
                new = resolved(payload, messages.get(int(ref[0])))
            else:
                key = TEXT_OF if TEXT_OF in payload else MESSAGE_OF
                message = messages.get(int(payload[key]))
                value: Any
                if key == TEXT_OF:
                    name, value = "text", "" if message is None else message.text
                else:
                    name, value = "message", None if message is None else message_to_dict(message)
                new = {
                    (name if k == key else k): (value if k == key else v)
                    for k, v in payload.items()
                }
            out.append(replace(record, payload=new))
        return out
