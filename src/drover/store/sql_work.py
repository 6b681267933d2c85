"""The turn's work in the SQL journal: messages, streamed text, tool calls, group commit.

:class:`SqlWork` holds the plans every write of a running turn builds on (lock the turn's
session, number a row) and the writes a :class:`~drover.journal.journal.Journal` makes while the
turn runs, alone or together in one transaction (:meth:`SqlWork.write_batch`, see
:mod:`drover.journal.writes`). Sessions, the turn's start and end, settling and recovery are in
:class:`~drover.store.sql_store.SqlStore`, which builds on this class.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, TypeAlias, cast

from drover.errors import StoreError
from drover.events import TERMINAL_TOOL_STATES
from drover.journal.fold import by_block, fold_block
from drover.journal.records import EventRecord, StoredMessage, ToolCallRecord
from drover.journal.rules import check_writable, partial_messages
from drover.journal.writes import (
    MESSAGE_OF,
    AppendEvent,
    AppendMessage,
    AppendPartialText,
    DiscardPartialText,
    EndTurn,
    JournalWrite,
    ReplaceMessage,
    UpsertToolCall,
)
from drover.messages import Message, TextBlock, ToolResultBlock, message_to_dict
from drover.store.dialect import Exec, Plan, Row, execute, rows
from drover.store.rows import (
    encode_marks,
    partial_text_record,
    stored_message_from_row,
    tool_call_from_row,
)
from drover.store.sql_log import Held, Mode, SqlLog, first_value

#: Bytes of free pages a finished step's text leaves before they go back to the file system.
RECLAIM_BYTES = 128 * 1024
#: Bytes of text rows deleted (an estimate, see :func:`_row_bytes`) before the free pages are
#: counted again: a page is freed only once every row on it is gone, so the rows deleted are at
#: least a quarter of the pages they free unless pages were less than a quarter full.
RECLAIM_CHECK_BYTES = RECLAIM_BYTES // 4
#: What a ``partial_text`` row costs beyond its text and marks (keys, numbers, record header).
_ROW_OVERHEAD = 64


def _row_id(row: Row) -> int:
    return int(row["id"])


def _row_bytes(row: Row) -> int:
    """About the bytes a ``partial_text`` row held."""
    return len(row["text"]) + len(row["marks"] or "") + _ROW_OVERHEAD


def _contiguous(group: Sequence[EventRecord]) -> bool:
    """Whether the rows (in log order) cover every number from the first's to the last's: then
    no other row of the log can hold a number between them (each number is one event's; a row
    that shares the previous one's last number holds the rest of the same delta)."""
    end = group[0].end_seq
    for record in group[1:]:
        if record.seq not in (end, end + 1):
            return False
        end = max(end, record.end_seq)
    return True


TERMINAL_SQL = ", ".join(f"'{state}'" for state in sorted(TERMINAL_TOOL_STATES))
#: Characters a batch stores (counted by :func:`_together`) above which it is a ``bulk``
#: write: made on the store's own thread, not its caller's. The final write of a 100 KB answer
#: (the message, and the fold of its ~1,000 text rows) takes ~40 ms, which no event loop
#: should stall for.
BULK_CHARS = 32 * 1024
# A call in a terminal state keeps it: a late write cannot reopen it.
_UPSERT_CALL = (
    "INSERT INTO tool_calls (turn_id, call_id, step, call_index, name, state, input, output, "
    "is_error, outcome_unknown, read_only, created_at, updated_at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?::jsonb, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (turn_id, call_id) DO UPDATE SET "
    "step = CASE WHEN excluded.step > 0 THEN excluded.step ELSE tool_calls.step END, "
    "call_index = excluded.call_index, name = excluded.name, state = excluded.state, "
    "input = COALESCE(excluded.input, tool_calls.input), "
    "output = COALESCE(excluded.output, tool_calls.output), "
    "is_error = excluded.is_error, outcome_unknown = excluded.outcome_unknown, "
    "read_only = excluded.read_only OR tool_calls.read_only, "
    f"updated_at = excluded.updated_at WHERE tool_calls.state NOT IN ({TERMINAL_SQL})"
)


@functools.cache
def _numbered_sql(
    table: str, columns: str, values: str, scope: tuple[str, ...]
) -> tuple[str, str, str]:
    """The statements of :meth:`SqlWork._numbered`: the insert that numbers its row and
    returns the number; or the read of the number, then the insert (built once each)."""
    where = " AND ".join(f"{column} = ?" for column in scope)
    return (
        f"INSERT INTO {table} ({columns}, seq) SELECT {values}, COALESCE(MAX(seq), 0) + 1 "
        f"FROM {table} WHERE {where} RETURNING seq",
        f"SELECT COALESCE(MAX(seq), 0) + 1 AS seq FROM {table} WHERE {where}",
        f"INSERT INTO {table} ({columns}, seq) VALUES ({values}, ?)",
    )


#: How a batch's writes are made (see :func:`_together`): by index, a write made in place of
#: the batch's (None: none) and, where numbered log rows run one after another, the end of
#: the run; and about how many characters the batch stores.
_Together: TypeAlias = tuple[dict[int, "UpsertToolCall | None"], dict[int, int], int]


def _together(writes: Sequence[JournalWrite]) -> _Together:
    """The writes of a batch made together (one pass over the batch).

    The states of one call written twice or more become one write of its row: the last,
    with what it leaves of the earlier ones, makes the row they would together (a call's
    row holds its latest state only, and nothing in a batch but the end of the turn reads
    the table). Only a state that is not terminal is folded into a later one (after a
    terminal state the later write is refused), and never across the end of the turn.

    Log rows the journal numbered, two or more one after the other, are logged together
    (:meth:`~drover.store.sql_log.SqlLog._append_numbered`).

    The characters counted are a message's text and results, partial text and a call's
    output: what the time of the batch's transaction grows with."""
    merged: dict[int, UpsertToolCall | None] = {}
    runs: dict[int, int] = {}
    last: dict[tuple[str, str], tuple[int, UpsertToolCall]] = {}
    chars = 0
    run = -1  # where the current run of numbered log rows began
    for i, write in enumerate(writes):
        kind = type(write)
        if kind is AppendEvent and cast(AppendEvent, write).seq is not None:
            if run < 0:
                run = i
            continue
        if i - run > 1 and run >= 0:
            runs[run] = i
        run = -1
        if kind is UpsertToolCall:
            call = cast(UpsertToolCall, write)
            chars += len(call.output or "")
            key = (call.turn_id, call.call_id)
            earlier = last.get(key)
            if earlier is not None and earlier[1].state not in TERMINAL_TOOL_STATES:
                j, first = earlier
                merged[j] = None
                call = merged[i] = _then(first, call)
            last[key] = (i, call)
        elif kind is AppendMessage or kind is ReplaceMessage:
            for block in cast(AppendMessage | ReplaceMessage, write).message.content:
                if type(block) is TextBlock:
                    chars += len(block.text)
                elif type(block) is ToolResultBlock:
                    chars += len(block.content)
        elif kind is AppendPartialText:
            chars += len(cast(AppendPartialText, write).text)
        elif kind is EndTurn:
            last.clear()
    if run >= 0 and len(writes) - run > 1:
        runs[run] = len(writes)
    return merged, runs, chars


def _then(first: UpsertToolCall, then: UpsertToolCall) -> UpsertToolCall:
    """What ``_UPSERT_CALL`` of ``first`` (not terminal), then of ``then``, leaves in the row,
    as one write: ``then``'s state, with ``first``'s step, input and output where ``then``
    keeps the row's, and read-only when either says so."""
    return UpsertToolCall(
        turn_id=then.turn_id,
        call_id=then.call_id,
        call_index=then.call_index,
        name=then.name,
        state=then.state,
        input=then.input if then.input is not None else first.input,
        output=then.output if then.output is not None else first.output,
        is_error=then.is_error,
        outcome_unknown=then.outcome_unknown,
        read_only=then.read_only or first.read_only,
        step=then.step if then.step > 0 else first.step,
    )


class SqlWork(SqlLog):
    """Writes of a running turn; :meth:`_end_turn` comes from the class that ends turns."""

    #: Bytes of text rows this store deleted since it last counted the free pages (it counts
    #: them at its first chance: pages an earlier process left free).
    _freed: int = RECLAIM_CHECK_BYTES

    # -- plans every write builds on -----------------------------------------------------------

    def _turn_session(
        self, turn_id: str, owner: str | None = None, held: Held | None = None
    ) -> Plan[str]:
        """Lock the session of a turn that is still running (under ``owner``, when given): the
        only kind of turn whose work may still be written. Returns the session's id."""
        if held is not None and (turn_id, owner) in held.turns:
            return held.turns[turn_id, owner]
        found = yield from rows(
            "SELECT s.id, t.status, t.owner FROM turns t JOIN sessions s ON s.id = t.session_id "
            f"WHERE t.id = ?{self.dialect.lock}",
            turn_id,
        )
        if not found:
            raise StoreError(f"no turn {turn_id}")
        row = found[0]
        check_writable(turn_id, str(row["status"]), row["owner"], owner)
        session_id = str(row["id"])
        if held is not None:
            held.turns[turn_id, owner] = session_id
            held.sessions.add(session_id)
        return session_id

    def _numbered(
        self, table: str, columns: str, values: str, params: tuple[Any, ...], scope: tuple[str, ...]
    ) -> Plan[int]:
        """Insert a row into ``table`` numbered ``max(seq) + 1`` among the rows that share its
        ``scope`` columns (the last of ``columns``, so their values end ``params``); its number.
        The caller holds the session's lock, so no other writer takes the same number."""
        returning, select, insert = _numbered_sql(table, columns, values, scope)
        scoped = params[-len(scope) :]
        if self.dialect.returning:
            found = yield from rows(returning, *params, *scoped)
            return int(first_value(found, "seq"))
        found = yield from rows(select, *scoped)
        seq = int(first_value(found, "seq"))
        yield from execute(insert, *params, seq)
        return seq

    def _add_message(self, turn_id: str, message: Message, partial: bool, now: float) -> Plan[int]:
        return self._numbered(
            "messages",
            "role, body, partial, created_at, turn_id",
            "?, ?::jsonb, ?, ?, ?",
            (message.role, self.dialect.json(message_to_dict(message)), partial, now, turn_id),
            ("turn_id",),
        )

    def _deltas(self, turn_id: str) -> Plan[list[tuple[int, int, str]]]:
        found = yield from rows(
            "SELECT step, block_index, text FROM partial_text WHERE turn_id = ? "
            "ORDER BY step, block_index, id",
            turn_id,
        )
        return [(int(r["step"]), int(r["block_index"]), str(r["text"])) for r in found]

    def _end_turn(self, w: EndTurn, now: float, held: Held | None = None) -> Plan[list[Any]]:
        raise NotImplementedError

    # -- the turn's work -----------------------------------------------------------------------

    async def reserve_seqs(
        self,
        session_id: str,
        upto: int,
        *,
        turn_id: str | None = None,
        owner: str | None = None,
    ) -> None:
        def reserve() -> Plan[None]:
            if turn_id is None:
                yield from self._need_session(session_id)
            elif (yield from self._turn_session(turn_id, owner)) != session_id:
                raise StoreError(f"turn {turn_id} is not a turn of session {session_id}")
            yield from execute(
                f"UPDATE sessions SET seq_reserved = {self.dialect.greatest}(seq_reserved, ?) "
                "WHERE id = ?",
                upto,
                session_id,
            )

        await self._perform(reserve(), "write")

    def _append_message(self, w: AppendMessage, now: float, held: Held | None = None) -> Plan[int]:
        session_id = yield from self._turn_session(w.turn_id, held=held)
        seq = yield from self._add_message(w.turn_id, w.message, w.partial, now)
        if w.step is not None:
            fold = (w.message, seq) if w.fold_from is not None and not w.partial else None
            yield from self._retire(session_id, w.turn_id, w.step, now, fold)
        if w.logged is not None:
            row = w.logged
            event = {k: (seq if k == MESSAGE_OF else v) for k, v in row.event.items()}
            yield from self._log(row.session_id, row.turn_id, event, now, row.seq, row.last_seq)
        return seq

    def _retire(
        self,
        session_id: str,
        turn_id: str,
        step: int | None,
        now: float,
        fold: tuple[Message, int] | None = None,
    ) -> Plan[None]:
        """Move the turn's streamed text rows (of ``step``, or all of them) from
        ``partial_text`` into the log: folded into the step's message when ``fold`` names it
        (the message and its seq) and that is exact (see :mod:`~drover.journal.fold`), as they
        are otherwise. A row from before the rows had numbers is only dropped."""
        where = "turn_id = ?" if step is None else "turn_id = ? AND step = ?"
        key = (turn_id,) if step is None else (turn_id, step)
        if self.dialect.returning:
            found = yield from rows(f"DELETE FROM partial_text WHERE {where} RETURNING *", *key)
            if not found:
                return
            found.sort(key=_row_id)
        else:
            found = yield from rows(f"SELECT * FROM partial_text WHERE {where} ORDER BY id", *key)
            if not found:
                return
            yield from execute(f"DELETE FROM partial_text WHERE {where}", *key)
        self._freed += sum(_row_bytes(r) for r in found)
        records = [partial_text_record(r) for r in found if r["seq"] is not None]
        folded_seqs: set[int] = set()
        if fold is not None and step is not None:
            message, message_seq = fold
            for group in by_block(records, step).values():
                folded = fold_block(group, message, message_seq)
                if folded is None:
                    continue
                low, high = group[0].seq, max(r.end_seq for r in group)
                inside = sum(1 for r in records if low <= r.seq <= high)
                if inside != len(group):
                    continue  # other rows between them: leave the block as it is
                if not _contiguous(group):  # numbers between them the log may hold
                    logged = yield from rows(
                        "SELECT COUNT(*) AS n FROM events WHERE session_id = ? "
                        "AND seq BETWEEN ? AND ?",
                        session_id,
                        low,
                        high,
                    )
                    if int(first_value(logged, "n")):
                        continue
                payload, marks = folded
                yield from self._log(
                    session_id, turn_id, payload, now, low, high, encode_marks(low, marks)
                )
                folded_seqs.update(r.seq for r in group)
        for r in records:
            if r.seq not in folded_seqs:
                encoded = encode_marks(r.seq, r.marks)
                yield from self._log_text(
                    session_id, turn_id, r.payload, r.created_at, r.seq, r.last_seq, encoded
                )
        yield from self._reclaim()

    def _reclaim(self) -> Plan[None]:
        """Give the pages the moved rows freed back to the file system, in this transaction,
        once there are enough of them (a few stay for the next rows to reuse: giving them back
        would move the file's last pages, the ones being appended to, every time). The free
        pages are counted only once the rows deleted since the last count could have freed a
        quarter of that much."""
        if not self.dialect.reclaim or self._freed < RECLAIM_CHECK_BYTES:
            return
        self._freed = 0
        found = yield from rows(
            "SELECT a.auto_vacuum AS mode, f.freelist_count AS free, p.page_size AS page "
            "FROM pragma_auto_vacuum a, pragma_freelist_count f, pragma_page_size p"
        )
        row = found[0]
        if int(row["mode"]) != 2:
            return  # a file made before auto_vacuum was set keeps them for later writes
        free = int(row["free"])
        # Each step of SQLite's statement frees one page and the driver steps it once.
        if free * int(row["page"]) >= RECLAIM_BYTES:
            for _ in range(free):
                yield from execute(self.dialect.reclaim)

    def _replace_message(self, w: ReplaceMessage, held: Held | None = None) -> Plan[None]:
        yield from self._turn_session(w.turn_id, held=held)
        body = self.dialect.json(message_to_dict(w.message))
        if w.seq is None:  # the turn's latest message
            count = yield from execute(
                "UPDATE messages SET body = ?::jsonb WHERE turn_id = ? "
                "AND seq = (SELECT MAX(seq) FROM messages WHERE turn_id = ?)",
                body,
                w.turn_id,
                w.turn_id,
            )
        else:
            count = yield from execute(
                "UPDATE messages SET body = ?::jsonb WHERE turn_id = ? AND seq = ?",
                body,
                w.turn_id,
                w.seq,
            )
        if count == 0:
            raise StoreError(f"no message {w.seq} in turn {w.turn_id}")

    def _append_partial_text(
        self, w: AppendPartialText, now: float, held: Held | None = None
    ) -> Plan[int]:
        """One row and nothing else: the log's streaming tail (moved into ``events`` when the
        step ends, by :meth:`_retire`)."""
        session_id = yield from self._turn_session(w.turn_id, held=held)
        seq = w.seq
        if seq is None:
            seq = yield from self._next_event_seq(session_id)
        encoded = None if w.seq is None else encode_marks(w.seq, w.marks)
        yield from execute(
            "INSERT INTO partial_text (turn_id, session_id, step, block_index, seq, last_seq, "
            "marks, text, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            *(w.turn_id, session_id, w.step, w.block_index, seq, max(seq, w.last_seq or seq)),
            *(encoded, self.dialect.text(w.text), now),
        )
        return seq

    def _discard(self, w: DiscardPartialText, now: float, held: Held | None = None) -> Plan[None]:
        """The step's text stays in the log (readers saw it, the retry event tells them to drop
        it) but no longer feeds recovery."""
        session_id = yield from self._turn_session(w.turn_id, held=held)
        yield from self._retire(session_id, w.turn_id, w.step, now)

    async def turn_messages(self, turn_id: str) -> list[StoredMessage]:
        # One snapshot for both reads: a fold committing in between cannot show twice.
        return await self._perform(self._turn_messages(turn_id, self._clock()), "snapshot")

    def _turn_messages(self, turn_id: str, now: float) -> Plan[list[StoredMessage]]:
        """The turn's messages, then those rebuilt from its unfolded deltas (``now`` their
        time); run it in a snapshot."""
        found = yield from rows(
            "SELECT turn_id, seq, body, partial, created_at FROM messages WHERE turn_id = ? "
            "ORDER BY seq",
            turn_id,
        )
        deltas = yield from self._deltas(turn_id)
        out = [stored_message_from_row(r) for r in found]
        first = out[-1].seq + 1 if out else 1
        for seq, message in enumerate(partial_messages(deltas), first):
            out.append(
                StoredMessage(
                    turn_id=turn_id, seq=seq, message=message, partial=True, created_at=now
                )
            )
        return out

    def _upsert_call(self, w: UpsertToolCall, now: float, held: Held | None = None) -> Plan[None]:
        d = self.dialect
        input_json = None if w.input is None else d.json(dict(w.input))
        if held is None or (w.turn_id, None) not in held.turns:
            yield from self._turn_session(w.turn_id, held=held)
        yield Exec(  # as is (not through ``execute``): the store makes one for every state
            _UPSERT_CALL,
            (
                *(w.turn_id, w.call_id, w.step, w.call_index, w.name, w.state, input_json),
                *(d.clean(w.output), w.is_error, w.outcome_unknown, w.read_only, now, now),
            ),
        )

    # -- group commit --------------------------------------------------------------------------

    async def write_batch(self, writes: Sequence[JournalWrite]) -> list[Any]:
        """See :meth:`~drover.journal.protocol.TurnJournal.write_batch`: one hop, one
        transaction."""
        now = self._clock()

        merged, runs, chars = _together(writes)
        mode: Mode = "bulk" if chars > BULK_CHARS else "write"
        if len(writes) == 1:  # (most writes: made as they are, checking their own turn)
            return [await self._perform(self._write_plan(writes[0], now), mode)]

        def batch() -> Plan[list[Any]]:
            held = Held()
            yield from self._check_first_turn(writes, held)
            out: list[Any] = []
            i, n = 0, len(writes)
            while i < n:
                end = runs.get(i)
                if end is not None:
                    numbered = cast(Sequence[AppendEvent], writes[i:end])
                    out += yield from self._append_numbered(numbered, now, held)
                    i = end
                    continue
                write = merged.get(i, writes[i]) if merged else writes[i]
                if write is None:  # made by a later write of the same call
                    out.append(None)
                else:
                    out.append((yield from self._write_plan(write, now, held)))
                i += 1
            return out

        return await self._perform(batch(), mode)

    def _check_first_turn(self, writes: Sequence[JournalWrite], held: Held) -> Plan[None]:
        """Check (and lock) the turn of the batch's first write of a running turn before the
        log rows ahead of it: its check locks their session too, which they then need not lock
        again. Nothing before it changes a turn, so checking it earlier decides the same."""
        for write in writes:
            if isinstance(write, AppendEvent):
                continue
            if isinstance(write, EndTurn):
                return  # checked under its owner, by itself
            yield from self._turn_session(write.turn_id, held=held)
            return

    def _write_plan(self, write: JournalWrite, now: float, held: Held | None = None) -> Plan[Any]:
        match write:  # (the most frequent first: most writes are log rows and call states)
            case AppendEvent():
                return self._append_event(write, now, held)
            case UpsertToolCall():
                return self._upsert_call(write, now, held)
            case AppendMessage():
                return self._append_message(write, now, held)
            case AppendPartialText():
                return self._append_partial_text(write, now, held)
            case ReplaceMessage():
                return self._replace_message(write, held)
            case DiscardPartialText():
                return self._discard(write, now, held)
            case EndTurn():
                return self._end_turn(write, now, held)

    async def tool_calls(
        self, turn_id: str | None = None, *, session_id: str | None = None
    ) -> list[ToolCallRecord]:
        if (turn_id is None) == (session_id is None):
            raise ValueError("pass exactly one of turn_id and session_id")
        column, key = ("t.id", turn_id) if turn_id is not None else ("t.session_id", session_id)
        found = await self._select(
            "SELECT tc.* FROM tool_calls tc JOIN turns t ON t.id = tc.turn_id "
            f"WHERE {column} = ? ORDER BY t.seq, tc.step, tc.call_index, tc.created_at",
            key,
        )
        return [tool_call_from_row(r) for r in found]
