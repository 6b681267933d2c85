"""Retention in the SQL journal: old sessions deleted in bounded batches, and the space returned.

A session is pruned when it was last updated before the cut-off, is not among the ``keep_last``
most recently updated sessions, and has no ``running`` turn — checked in the transaction that
deletes it, so a session whose turn is running (or that a new turn touched since it was
chosen) is never pruned. Deleting the session's row deletes everything it holds (every table
of a session's content references it, or one of its turns, ``ON DELETE CASCADE``).

Each batch is one short write transaction of at most ``limit`` sessions, so live turns' writes
interleave with a long prune instead of waiting for it. On PostgreSQL the batch locks the rows
it deletes and skips any a live write holds (``SKIP LOCKED``): it never waits on a live turn.
The file contents no image names any more go too, but not one a live write is naming in a
transaction not committed yet (:func:`~drover.store.sql.files.drop_unused_blobs`).
On SQLite the pages a batch frees go back to the file system in the same transaction
(:func:`reclaim`, incremental vacuum), when the file was made with ``auto_vacuum =
INCREMENTAL`` as every file this version creates is. Each step of it costs more the longer the
free list is: giving back a batch's pages at once, while the list is short, took a third of
the time that giving back all of them after the last batch did (``bench/gc.py``). An older
file keeps the pages for later writes until :func:`vacuum` rewrites it once.
"""

from __future__ import annotations

from drover.journal.records import PruneBatch
from drover.store.sql.common import first_value
from drover.store.sql.dialect import Dialect
from drover.store.sql.files import drop_unused_blobs
from drover.store.sql.plan import Plan, execute, rows

#: The tables a session's content lives in (what the journal's size counts on PostgreSQL).
TABLES = (
    "sessions",
    "turns",
    "messages",
    "tool_calls",
    "partial_text",
    "events",
    "permission_grants",
    "webhook_outbox",
)

#: The sessions that may be pruned (parameters: the cut-off, ``keep_last``).
_CANDIDATES = (
    "FROM sessions s WHERE s.updated_at < ? "
    "AND s.id NOT IN (SELECT k.id FROM sessions k ORDER BY k.updated_at DESC LIMIT ?) "
    "AND NOT EXISTS (SELECT 1 FROM turns r WHERE r.session_id = s.id AND r.status = 'running')"
)
#: More pages than any batch frees.
_NO_LIMIT = 1 << 62
#: Deliveries done or given up before the cut-off (parameters: the cut-off, twice).
_SPENT = "(delivered_at < ? OR failed_at < ?)"


def _skip_locked(d: Dialect) -> str:
    return f"{d.lock} SKIP LOCKED" if d.lock else ""


def prune_batch(d: Dialect, cutoff: float, keep_last: int, limit: int) -> Plan[PruneBatch]:
    """Delete up to ``limit`` prunable sessions (oldest first) and up to ``limit`` spent
    outbox rows, and give the pages they freed back (SQLite); run it in a write
    transaction."""
    found = yield from rows(
        f"SELECT s.id {_CANDIDATES} ORDER BY s.updated_at, s.id LIMIT ?{_skip_locked(d)}",
        cutoff,
        keep_last,
        limit,
    )
    ids = [str(r["id"]) for r in found]
    turns = events = 0
    if ids:
        marks = ", ".join("?" for _ in ids)
        counted = yield from rows(
            f"SELECT (SELECT COUNT(*) FROM turns WHERE session_id IN ({marks})) AS turns, "
            "(SELECT COUNT(*) FROM events WHERE session_num IN (SELECT num FROM sessions "
            f"WHERE id IN ({marks}))) AS events",
            *ids,
            *ids,
        )
        turns, events = int(counted[0]["turns"]), int(counted[0]["events"])
        yield from execute(f"DELETE FROM sessions WHERE id IN ({marks})", *ids)
        # A file's content is kept once for every session that names it: what none names now.
        yield from drop_unused_blobs(d)
    spent = yield from execute(
        "DELETE FROM webhook_outbox WHERE id IN (SELECT id FROM webhook_outbox "
        f"WHERE {_SPENT} LIMIT ?)",
        cutoff,
        cutoff,
        limit,
    )
    yield from reclaim(d, _NO_LIMIT)
    return PruneBatch(sessions=len(ids), turns=turns, events=events, deliveries=spent)


def preview(d: Dialect, cutoff: float, keep_last: int) -> Plan[PruneBatch]:
    """What pruning would delete now, deleting nothing (a dry run); run it in a snapshot."""
    found = yield from rows(
        f"SELECT (SELECT COUNT(*) {_CANDIDATES}) AS sessions, "
        f"(SELECT COUNT(*) FROM turns WHERE session_id IN (SELECT s.id {_CANDIDATES})) AS turns, "
        f"(SELECT COUNT(*) FROM events WHERE session_num IN (SELECT s.num {_CANDIDATES})) "
        "AS events, "
        f"(SELECT COUNT(*) FROM webhook_outbox WHERE {_SPENT}) AS deliveries",
        *(cutoff, keep_last) * 3,
        cutoff,
        cutoff,
    )
    row = found[0]
    return PruneBatch(
        sessions=int(row["sessions"]),
        turns=int(row["turns"]),
        events=int(row["events"]),
        deliveries=int(row["deliveries"]),
    )


def reclaim(d: Dialect, most: int) -> Plan[int]:
    """Give up to ``most`` free pages back to the file system (SQLite in incremental mode);
    run it in a write transaction. The free pages left (0: none, or nothing to give back)."""
    if not d.reclaim:
        return 0
    found = yield from rows(
        "SELECT a.auto_vacuum AS mode, f.freelist_count AS free "
        "FROM pragma_auto_vacuum a, pragma_freelist_count f"
    )
    if int(found[0]["mode"]) != 2:
        return 0  # a file made before auto_vacuum was set: see vacuum()
    free = int(found[0]["free"])
    # The driver steps the statement once, and each step gives back one page.
    for _ in range(min(free, most)):
        yield from execute(d.reclaim)
    return max(free - most, 0)


def journal_bytes(d: Dialect) -> Plan[tuple[int, int]]:
    """The journal's size in bytes, and how much of it is free pages (SQLite: the file's
    pages; PostgreSQL: its tables and indexes, with no free count: 0)."""
    if d.name == "sqlite":
        found = yield from rows(
            "SELECT c.page_count AS pages, f.freelist_count AS free, p.page_size AS size "
            "FROM pragma_page_count c, pragma_freelist_count f, pragma_page_size p"
        )
        row = found[0]
        size = int(row["size"])
        return int(row["pages"]) * size, int(row["free"]) * size
    marks = ", ".join("?" for _ in TABLES)
    found = yield from rows(
        "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) AS n FROM pg_class c "
        f"WHERE c.relkind = 'r' AND c.relname IN ({marks}) "
        "AND c.relnamespace = current_schema()::regnamespace",
        *TABLES,
    )
    return int(first_value(found, "n")), 0


def vacuum(d: Dialect) -> Plan[None]:
    """Rewrite the journal to return all its free space, once (outside any transaction).
    SQLite also switches a file made without incremental vacuum to it, so later prunes give
    their pages back at once. It takes the file's write lock for the whole rewrite."""
    if d.name == "sqlite":
        yield from execute("PRAGMA auto_vacuum = INCREMENTAL")
        yield from execute("VACUUM")
    else:
        for table in TABLES:
            yield from execute(f"VACUUM {table}")
