"""A step's streamed text in the SQL journal: its ``partial_text`` rows, and their retirement.

While a step streams, each text flush is one ``partial_text`` row — the log's streaming tail
(read back as a coalesced ``text_delta`` event) and what recovery folds into a partial message.
When the step's message is stored, or its stream is retried, or its turn ends, its rows are
*retired*: moved into the log (folded into one row per block that refers to the message, when
that is exact: see :mod:`drover.journal.fold`), and deleted from ``partial_text``. The pages
they leave free go back to the file system once there are enough of them (SQLite).
"""

from __future__ import annotations

from collections.abc import Sequence

from drover.core.messages import Message
from drover.journal.fold import by_block, fold_block
from drover.journal.records import EventRecord
from drover.journal.writes import AppendPartialText, DiscardPartialText
from drover.store.sql.common import Held, first_value, turn_session
from drover.store.sql.dialect import Dialect
from drover.store.sql.keys import SESSION_NUM
from drover.store.sql.log import log, log_text, next_event_seq
from drover.store.sql.plan import Plan, Row, execute, rows
from drover.store.sql.rows import encode_marks, partial_text_record

#: Bytes of free pages a finished step's text leaves before they go back to the file system.
RECLAIM_BYTES = 128 * 1024
#: Bytes of text rows deleted (an estimate, see :func:`_row_bytes`) before the free pages are
#: counted again: a page is freed only once every row on it is gone, so the rows deleted are at
#: least a quarter of the pages they free unless pages were less than a quarter full.
RECLAIM_CHECK_BYTES = RECLAIM_BYTES // 4
#: What a ``partial_text`` row costs beyond its text and marks (keys, numbers, record header).
_ROW_OVERHEAD = 64


class FreedSpace:
    """Bytes of text rows one store deleted since it last counted the free pages (it counts
    them at its first chance: pages an earlier process left free)."""

    __slots__ = ("freed",)

    def __init__(self) -> None:
        self.freed = RECLAIM_CHECK_BYTES


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


def deltas(turn_id: str) -> Plan[list[tuple[int, int, str]]]:
    """The turn's text deltas not retired yet: ``(step, block_index, text)`` in order."""
    found = yield from rows(
        "SELECT step, block_index, text FROM partial_text WHERE turn_id = ? "
        "ORDER BY step, block_index, id",
        turn_id,
    )
    return [(int(r["step"]), int(r["block_index"]), str(r["text"])) for r in found]


def append_partial_text(
    d: Dialect, w: AppendPartialText, now: float, held: Held | None = None
) -> Plan[int]:
    """One row and nothing else: the log's streaming tail (moved into ``events`` when the step
    ends, by :func:`retire`)."""
    session_id = yield from turn_session(d, w.turn_id, held=held)
    seq = w.seq
    if seq is None:
        seq = yield from next_event_seq(d, session_id)
    encoded = None if w.seq is None else encode_marks(w.seq, w.marks)
    yield from execute(
        "INSERT INTO partial_text (turn_id, session_id, step, block_index, seq, last_seq, "
        "marks, text, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        *(w.turn_id, session_id, w.step, w.block_index, seq, max(seq, w.last_seq or seq)),
        *(encoded, d.text(w.text), now),
    )
    return seq


def discard(
    d: Dialect, space: FreedSpace, w: DiscardPartialText, now: float, held: Held | None = None
) -> Plan[None]:
    """The step's text stays in the log (readers saw it, the retry event tells them to drop
    it) but no longer feeds recovery."""
    session_id = yield from turn_session(d, w.turn_id, held=held)
    yield from retire(d, space, session_id, w.turn_id, w.step, now, held=held)


def retire(
    d: Dialect,
    space: FreedSpace,
    session_id: str,
    turn_id: str,
    step: int | None,
    now: float,
    fold: tuple[Message, int] | None = None,
    held: Held | None = None,
) -> Plan[None]:
    """Move the turn's streamed text rows (of ``step``, or all of them) from ``partial_text``
    into the log: folded into the step's message when ``fold`` names it (the message and its
    seq) and that is exact (see :mod:`~drover.journal.fold`), as they are otherwise. A row from
    before the rows had numbers is only dropped."""
    where = "turn_id = ?" if step is None else "turn_id = ? AND step = ?"
    key = (turn_id,) if step is None else (turn_id, step)
    if d.returning:
        found = yield from rows(f"DELETE FROM partial_text WHERE {where} RETURNING *", *key)
        if not found:
            return
        found.sort(key=_row_id)
    else:
        found = yield from rows(f"SELECT * FROM partial_text WHERE {where} ORDER BY id", *key)
        if not found:
            return
        yield from execute(f"DELETE FROM partial_text WHERE {where}", *key)
    space.freed += sum(_row_bytes(r) for r in found)
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
                    f"SELECT COUNT(*) AS n FROM events WHERE session_num = {SESSION_NUM} "
                    "AND seq BETWEEN ? AND ?",
                    session_id,
                    low,
                    high,
                )
                if int(first_value(logged, "n")):
                    continue
            payload, marks = folded
            encoded = encode_marks(low, marks)
            yield from log(d, session_id, turn_id, payload, now, low, high, encoded, held=held)
            folded_seqs.update(r.seq for r in group)
    for r in records:
        if r.seq not in folded_seqs:
            encoded = encode_marks(r.seq, r.marks)
            yield from log_text(
                d, session_id, turn_id, r.payload, r.created_at, r.seq, r.last_seq, encoded, held
            )
    yield from reclaim(d, space)


def reclaim(d: Dialect, space: FreedSpace) -> Plan[None]:
    """Give the pages the moved rows freed back to the file system, in this transaction, once
    there are enough of them (a few stay for the next rows to reuse: giving them back would
    move the file's last pages, the ones being appended to, every time). The free pages are
    counted only once the rows deleted since the last count could have freed a quarter of that
    much."""
    if not d.reclaim or space.freed < RECLAIM_CHECK_BYTES:
        return
    space.freed = 0
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
            yield from execute(d.reclaim)
