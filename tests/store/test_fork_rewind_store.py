"""Forks, file images and rewinds in the store, on every backend: what a fork copies and
records, content kept once and only under the cap, a rewind's marks, refusals while a turn
runs, and blobs going with the last session that names them."""

from __future__ import annotations

import hashlib
import time
from typing import TypeVar, cast

import pytest
import support.writes as writes

from drover.core.messages import TextBlock, ToolUseBlock, assistant_message, user_message
from drover.errors import DroverError, SessionBusyError, StoreError
from drover.journal.protocol import Store
from drover.journal.writes import EndTurn, KeepFileImage
from drover.store.sql import files as sql_files
from drover.store.sql.common import lock_session
from drover.store.sql.plan import Atomic, Plan, rows
from drover.store.sql.store import SqlStore

T = TypeVar("T")

OWNER = "test-host:1:1"


async def _ended_turn(store: Store, session_id: str, prompt: str, path: str = "") -> str:
    turn = await store.begin_turn(session_id, user_message(prompt), OWNER, 30)
    use = ToolUseBlock(id=f"c-{prompt}", name="write_file", input={"path": path or prompt})
    await writes.append_message(store, turn.id, assistant_message([TextBlock(text="ok"), use]))
    await writes.upsert_tool_call(
        store, turn.id, use.id, call_index=0, name="write_file", state="output-available"
    )
    if path:
        await store.write_batch([_image(turn.id, path, b"before " + path.encode(), b"after")])
    await store.write_batch([EndTurn(turn_id=turn.id, status="completed")])
    return turn.id


def _image(
    turn_id: str, path: str, before: bytes | None, after: bytes, cap: int = 1000
) -> KeepFileImage:
    return KeepFileImage(
        turn_id=turn_id,
        call_id="c",
        path=f"/w/{path}",
        shown=path,
        before=before,
        after_hash=hashlib.sha256(after).hexdigest(),
        cap=cap,
    )


async def _blobs(store: Store) -> int:
    assert isinstance(store, SqlStore)
    found = await store.connection.perform(rows("SELECT COUNT(*) AS n FROM file_blobs"), "read")
    return int(found[0]["n"])


async def test_a_fork_copies_the_turns_up_to_one_and_records_its_source(store: Store) -> None:
    await store.create_session(session_id="src", workdir="/w", model="m", owner="alice")
    first = await _ended_turn(store, "src", "one", "a.txt")
    await _ended_turn(store, "src", "two")
    running = await store.begin_turn("src", user_message("three"), OWNER, 30)

    fork = await store.fork_session("src", turn_id=first, owner="bob")
    assert (fork.forked_from, fork.forked_turn, fork.owner) == ("src", first, "bob")
    assert (await store.get_session(fork.id)) == fork
    (copied,) = await store.turns(fork.id)
    assert copied.id != first and copied.status == "completed"
    assert copied.user_message == user_message("one")
    assert [m.message.text for m in await store.turn_messages(copied.id)] == ["ok"]
    assert [c.name for c in await store.tool_calls(copied.id)] == ["write_file"]
    assert [i.shown for i in await store.file_images(fork.id, 1)] == ["a.txt"]
    assert await store.events_after(fork.id) == []  # the log starts at the fork

    # Every turn not running, by default; the running one cannot be the cut.
    whole = await store.fork_session("src")
    assert [t.seq for t in await store.turns(whole.id)] == [1, 2]
    with pytest.raises(SessionBusyError):
        await store.fork_session("src", turn_id=running.id)
    with pytest.raises(StoreError, match="no turn"):
        await store.fork_session("src", turn_id="nope")
    with pytest.raises(StoreError, match="no session"):
        await store.fork_session("nope")


async def test_content_before_a_write_is_kept_once_and_only_under_the_cap(store: Store) -> None:
    await store.create_session(session_id="s", workdir="/w", model="m")
    turn = await store.begin_turn("s", user_message("go"), OWNER, 30)
    await store.write_batch(
        [
            _image(turn.id, "a", b"same", b"x"),
            _image(turn.id, "b", b"same", b"y"),
            _image(turn.id, "new", None, b"z"),
            _image(turn.id, "big", b"0123456789", b"w", cap=5),
        ]
    )
    images = await store.file_images("s", 1)
    assert [(i.shown, i.before, i.before_size, i.seq) for i in images] == [
        ("a", "kept", 4, 1),
        ("b", "kept", 4, 2),
        ("new", "absent", None, 3),
        ("big", "too_large", 10, 4),
    ]
    assert images[0].before_hash == images[1].before_hash
    assert await store.file_blob(images[0].before_hash or "") == b"same"
    assert await _blobs(store) == 1
    # Only a running turn takes more.
    await store.write_batch([EndTurn(turn_id=turn.id, status="completed")])
    with pytest.raises(DroverError):
        await store.write_batch([_image(turn.id, "late", b"late", b"x")])


async def test_a_rewind_marks_turns_and_restored_images_and_waits_for_a_running_turn(
    store: Store,
) -> None:
    await store.create_session(session_id="s", workdir="/w", model="m")
    await _ended_turn(store, "s", "one")
    second = await _ended_turn(store, "s", "two", "a.txt")
    third = await _ended_turn(store, "s", "three")
    running = await store.begin_turn("s", user_message("four"), OWNER, 30)
    with pytest.raises(SessionBusyError):
        await store.rewind_turns("s", second)
    await store.write_batch([EndTurn(turn_id=running.id, status="interrupted")])

    image = (await store.file_images("s", 2))[0]
    before = await store.events_after("s")
    rewound, logged = await store.rewind_turns("s", second, [(image.turn_id, image.seq)])
    assert rewound == [second, third, running.id]
    # The rewind is in the session's event log, after everything before it, as it was told.
    assert logged is not None and logged.turn_id is None
    assert dict(logged.payload) == {"type": "turns_rewound", "turn_ids": rewound}
    after = await store.events_after("s", before[-1].end_seq if before else 0)
    assert [(e.end_seq, e.turn_id, dict(e.payload)) for e in after] == [
        (logged.end_seq, None, dict(logged.payload))
    ]
    turns = await store.turns("s")
    assert [(t.rewound, t.discarded) for t in turns] == [
        (False, False),
        (True, True),
        (True, True),
        (True, True),
    ]
    assert (await store.file_images("s", 1))[0].restored_at is not None
    # Rewinding again from earlier marks only the turns not rewound yet.
    again, logged = await store.rewind_turns("s", turns[0].id)
    assert again == [turns[0].id] and logged is not None
    with pytest.raises(StoreError, match="no turn"):
        await store.rewind_turns("s", "nope")


def _recorded(plan: Plan[T], statements: list[str]) -> Plan[T]:
    """``plan``, noting the SQL of every statement it makes."""
    op = next(plan)
    try:
        while True:
            statements.append(op.sql if not isinstance(op, Atomic) else "atomic")
            op = plan.send((yield op))
    except StopIteration as stop:
        return cast(T, stop.value)


async def test_a_rewind_locks_and_checks_its_session_once(store: Store) -> None:
    """The rewind's event is logged under the lock the rewind took, the session known to be
    idle: neither the session's row nor its running turn is read again for it."""
    assert isinstance(store, SqlStore)
    await store.create_session(session_id="s", workdir="/w", model="m")
    turn = await _ended_turn(store, "s", "one")
    statements: list[str] = []
    plan = sql_files.rewind_turns(store.dialect, "s", turn, [], time.time())
    rewound, logged = await store.connection.perform(_recorded(plan, statements), "write")
    assert rewound == [turn]
    assert logged is not None and dict(logged.payload)["type"] == "turns_rewound"
    lock = next(lock_session(store.dialect, "s")).sql
    assert statements.count(lock) == 1
    assert sum("status = 'running'" in sql for sql in statements) == 1


async def test_blobs_go_with_the_last_session_that_names_them(store: Store) -> None:
    await store.create_session(session_id="s", workdir="/w", model="m")
    await _ended_turn(store, "s", "one", "a.txt")
    fork = await store.fork_session("s")
    assert await _blobs(store) == 1
    assert await store.delete_session("s")
    assert await _blobs(store) == 1  # the fork still names it
    assert await store.delete_session(fork.id)
    assert await _blobs(store) == 0


async def test_pruning_old_sessions_takes_the_blobs_only_they_named(store: Store) -> None:
    await store.create_session(session_id="old", workdir="/w", model="m")
    await _ended_turn(store, "old", "one", "a.txt")
    fork = await store.fork_session("old")
    assert await _blobs(store) == 1
    # Everything is older than a cut-off in the future; the latest session (the fork) is kept.
    await store.prune_batch(cutoff=1e12, keep_last=1, limit=10)
    assert await store.get_session("old") is None
    assert await _blobs(store) == 1  # the fork still names it
    await store.prune_batch(cutoff=1e12, keep_last=0, limit=10)
    assert await store.get_session(fork.id) is None
    assert await _blobs(store) == 0
