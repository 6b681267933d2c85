"""Session control in the SQL journal: forks, the pre-images of file writes, rewinds.

A fork is a new session holding copies of the source's turns up to one (their messages, tool
calls and file images; not the event log, which starts empty at the fork), made in one
transaction under the source's lock. A file image row records one write of a tool before it
happens; the content before is stored once per SHA-256 in ``file_blobs`` (two writes of the
same content share a row), and a blob no image names any more goes with the last session that
named it — never while a write not committed yet names it: the write holds the blob's row, and
the deleter skips held rows and looks again before it deletes (:func:`drop_unused_blobs`). A
rewind marks turns rewound (and discarded, so history skips them) and the images a rewind put
back restored, in one transaction, refused while a turn of the session runs or another holds
the session (the rewind's own hold, :mod:`drover.store.sql.holds`, ends there), and only when
the turns are still those it planned to mark.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from drover.errors import SessionBusyError, StoreError
from drover.journal.owners import owner_alive
from drover.journal.records import EventRecord, FileImageRecord, SessionRecord, TurnRecord
from drover.journal.rules import rewound_event
from drover.journal.writes import KeepFileImage
from drover.store.sql import holds
from drover.store.sql.common import Held, lock_session, numbered, turn_session
from drover.store.sql.dialect import Dialect
from drover.store.sql.keys import TURN_NUM
from drover.store.sql.plan import Plan, execute, rows
from drover.store.sql.queue import log_idle
from drover.store.sql.rows import session_from_row, turn_from_row

_TURN_COPY = (
    "status, user_message, reason, error, usage, discarded, created_at, updated_at, ended_at, "
    "rewound_at"
)


def keep_file_image(d: Dialect, w: KeepFileImage, now: float, held: Held | None) -> Plan[None]:
    """See :class:`~drover.journal.writes.KeepFileImage`."""
    yield from turn_session(d, w.turn_id, held=held)
    size = None if w.before is None else len(w.before)
    digest = None
    if w.before is None:
        state = "absent"
    elif len(w.before) > w.cap:
        state = "too_large"
    else:
        state = "kept"
        digest = hashlib.sha256(w.before).hexdigest()
        yield from _keep_blob(d, digest, w.before)
    yield from numbered(
        d,
        "file_images",
        "call_id, path, shown, before, before_hash, before_size, after_hash, created_at, turn_id",
        "?, ?, ?, ?, ?, ?, ?, ?, ?",
        (
            w.call_id,
            d.text(w.path),
            d.text(w.shown),
            state,
            digest,
            size,
            w.after_hash,
            now,
            w.turn_id,
        ),
        ("turn_id = ?",),
    )


def file_images(session_id: str, from_seq: int) -> Plan[list[FileImageRecord]]:
    """The file writes of the session's turns numbered ``from_seq`` or later, in order."""
    found = yield from rows(
        "SELECT i.*, t.seq AS turn_seq FROM file_images i JOIN turns t ON t.id = i.turn_id "
        "WHERE t.session_id = ? AND t.seq >= ? ORDER BY t.seq, i.seq",
        session_id,
        from_seq,
    )
    return [
        FileImageRecord(
            turn_id=str(r["turn_id"]),
            turn_seq=int(r["turn_seq"]),
            seq=int(r["seq"]),
            call_id=str(r["call_id"]),
            path=str(r["path"]),
            shown=str(r["shown"]),
            before=r["before"],
            before_hash=r["before_hash"],
            before_size=r["before_size"],
            after_hash=str(r["after_hash"]),
            restored_at=r["restored_at"],
        )
        for r in found
    ]


def file_blob(digest: str) -> Plan[bytes | None]:
    found = yield from rows("SELECT data FROM file_blobs WHERE hash = ?", digest)
    return bytes(found[0]["data"]) if found else None


def _keep_blob(d: Dialect, digest: str, data: bytes) -> Plan[None]:
    """Store ``data`` under its hash unless it is stored, and keep the stored row from being
    deleted until this transaction ends (the image row it inserts next names it, unseen by
    others until the commit): :func:`drop_unused_blobs` skips a row held so, and a row it took
    first is gone when this one looks again — then stored anew."""
    for _ in range(3):
        inserted = yield from execute(
            "INSERT INTO file_blobs (hash, size, data) VALUES (?, ?, ?) "
            "ON CONFLICT (hash) DO NOTHING",
            digest,
            len(data),
            data,
        )
        if inserted:
            return  # (a new row: no other transaction sees it before this one commits)
        held = yield from rows(f"SELECT hash FROM file_blobs WHERE hash = ?{d.key_share}", digest)
        if held:
            return
    raise StoreError(f"the content {digest[:12]}… is being stored and deleted by others")


def drop_unused_blobs(d: Dialect) -> Plan[int]:
    """Delete the blobs no file image names (after a session's images went); how many.

    A write naming a blob in a transaction not committed yet is invisible here, so on
    PostgreSQL this goes in two steps: the blobs no image names are locked, skipping those a
    live write holds (:func:`_keep_blob`); then those still named by none — looked at again,
    with every write committed since — are deleted. A write that held one and committed in
    between is thus seen; one that comes after waits for this transaction, and stores its
    content anew."""
    unnamed = "NOT EXISTS (SELECT 1 FROM file_images i WHERE i.before_hash = file_blobs.hash)"
    if not d.delete_skip:
        return (yield from execute(f"DELETE FROM file_blobs WHERE {unnamed}"))
    found = yield from rows(f"SELECT hash FROM file_blobs WHERE {unnamed}{d.delete_skip}")
    if not found:
        return 0
    taken = [str(r["hash"]) for r in found]
    return (yield from execute(f"DELETE FROM file_blobs WHERE hash = ANY(?) AND {unnamed}", taken))


def fork_session(
    d: Dialect,
    source_id: str,
    through: str | None,
    new_id: Callable[[], str],
    owner: str | None,
    now: float,
) -> Plan[SessionRecord]:
    """A new session (``new_id()``) with copies of ``source_id``'s turns up to and including
    ``through`` (None: every turn that is not running), owned by ``owner``."""
    if not (yield from lock_session(d, source_id)):
        raise StoreError(f"no session {source_id}")
    found = yield from rows("SELECT * FROM turns WHERE session_id = ? ORDER BY seq", source_id)
    turns = [turn_from_row(r) for r in found]
    if through is None:  # (a running turn is the session's last)
        kept = [t for t in turns if t.status != "running"]
    else:
        cut = next((t for t in turns if t.id == through), None)
        if cut is None:
            raise StoreError(f"no turn {through} in session {source_id}")
        if cut.status == "running":
            raise SessionBusyError(source_id, cut.id)
        kept = [t for t in turns if t.seq <= cut.seq]
    source = session_from_row(
        (yield from rows("SELECT * FROM sessions WHERE id = ?", source_id))[0]
    )
    record = SessionRecord(
        id=new_id(),
        created_at=now,
        updated_at=now,
        workdir=source.workdir,
        model=source.model,
        title=source.title,
        owner=owner,
        forked_from=source_id,
        forked_turn=kept[-1].id if kept else None,
    )
    yield from execute(
        "INSERT INTO sessions (id, created_at, updated_at, workdir, model, title, owner, "
        "forked_from, forked_turn) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        record.id,
        now,
        now,
        record.workdir,
        record.model,
        d.clean(record.title),
        owner,
        source_id,
        record.forked_turn,
    )
    for turn in kept:
        yield from _copy_turn(turn, new_id(), record.id)
    return record


def _copy_turn(turn: TurnRecord, copy_id: str, session_id: str) -> Plan[None]:
    yield from execute(
        f"INSERT INTO turns (id, session_id, seq, {_TURN_COPY}) "
        f"SELECT ?, ?, seq, {_TURN_COPY} FROM turns WHERE id = ?",
        copy_id,
        session_id,
        turn.id,
    )
    yield from execute(
        "INSERT INTO messages (turn_num, seq, role, body, partial, created_at) "
        f"SELECT {TURN_NUM}, seq, role, body, partial, created_at FROM messages "
        f"WHERE turn_num = {TURN_NUM}",
        copy_id,
        turn.id,
    )
    yield from execute(
        "INSERT INTO tool_calls (turn_num, call_id, step, call_index, name, state, input, "
        "output, is_error, outcome_unknown, read_only, created_at, updated_at) "
        f"SELECT {TURN_NUM}, call_id, step, call_index, name, state, input, output, is_error, "
        "outcome_unknown, read_only, created_at, updated_at FROM tool_calls "
        f"WHERE turn_num = {TURN_NUM}",
        copy_id,
        turn.id,
    )
    yield from execute(
        "INSERT INTO file_images (turn_id, seq, call_id, path, shown, before, before_hash, "
        "before_size, after_hash, restored_at, created_at) "
        "SELECT ?, seq, call_id, path, shown, before, before_hash, before_size, after_hash, "
        "restored_at, created_at FROM file_images WHERE turn_id = ?",
        copy_id,
        turn.id,
    )


def rewind_turns(
    d: Dialect,
    session_id: str,
    turn_id: str,
    restored: list[tuple[str, int]],
    now: float,
    hold: str | None = None,
    planned: tuple[str, ...] | None = None,
    alive: Callable[[str], bool] = owner_alive,
) -> Plan[tuple[list[str], EventRecord | None]]:
    """Mark the turn ``turn_id`` of the session and every later one not yet rewound rewound
    (and discarded), and the file images ``restored`` (``(turn_id, seq)``) restored; the ids
    of the turns rewound and the ``turns_rewound`` event logged (None: none was rewound).
    Refused while a turn of the session runs, while another holds the session than ``hold``
    (whose hold ends here), and when the turns to mark are not the ``planned`` ones."""
    if not (yield from lock_session(d, session_id)):
        raise StoreError(f"no session {session_id}")
    running = yield from rows(
        "SELECT id FROM turns WHERE session_id = ? AND status = 'running' LIMIT 1", session_id
    )
    if running:
        raise SessionBusyError(session_id, str(running[0]["id"]))
    if (yield from holds.check(session_id, hold, now, alive)):
        assert hold is not None
        yield from holds.drop(session_id, hold)
    cut = yield from rows(
        "SELECT seq FROM turns WHERE id = ? AND session_id = ?", turn_id, session_id
    )
    if not cut:
        raise StoreError(f"no turn {turn_id} in session {session_id}")
    seq = int(cut[0]["seq"])
    found = yield from rows(
        "SELECT id FROM turns WHERE session_id = ? AND seq >= ? AND rewound_at IS NULL "
        "ORDER BY seq",
        session_id,
        seq,
    )
    if planned is not None and tuple(str(r["id"]) for r in found) != planned:
        # (a turn started, or another rewind marked some, since the plan: what the rewind
        # checked and put back is not what it would mark)
        raise StoreError(
            f"session {session_id} changed since the rewind was planned: nothing was marked "
            "(plan it again)"
        )
    yield from execute(
        "UPDATE turns SET rewound_at = ?, discarded = TRUE, updated_at = ? "
        "WHERE session_id = ? AND seq >= ? AND rewound_at IS NULL",
        now,
        now,
        session_id,
        seq,
    )
    # The session's last turn carries the time of the latest rewind (a process holding the
    # session reloads it when its last turn's mark changed).
    yield from execute(
        "UPDATE turns SET rewound_at = ? WHERE session_id = ? AND seq = "
        "(SELECT MAX(seq) FROM turns WHERE session_id = ?)",
        now,
        session_id,
        session_id,
    )
    for image_turn, image_seq in restored:
        yield from execute(
            "UPDATE file_images SET restored_at = ? WHERE turn_id = ? AND seq = ? "
            "AND turn_id IN (SELECT id FROM turns WHERE session_id = ?)",
            now,
            image_turn,
            image_seq,
            session_id,
        )
    yield from execute("UPDATE sessions SET updated_at = ? WHERE id = ?", now, session_id)
    ids = [str(r["id"]) for r in found]
    if not ids:
        return ids, None
    # Logged in the same transaction, so a live client and a replay both see the rewind at
    # the same place in the session's stream; the session is locked and idle (checked above).
    logged = yield from log_idle(d, session_id, rewound_event(ids), now)
    return ids, logged
