"""Managing stored sessions, on every backend: finding one by the start of its id, renaming it,
deleting it with everything it holds, and the usage a running turn has reported so far."""

from __future__ import annotations

import asyncio

import pytest
import support.writes as writes

from drover.core.events import UsageReport, event_to_dict
from drover.core.messages import (
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    assistant_message,
    tool_result_message,
    user_message,
)
from drover.errors import SessionBusyError, StoreError
from drover.journal.protocol import Store
from drover.store.sql import sessions as sql_sessions
from drover.store.sql.plan import Plan, execute, rows
from drover.store.sql.store import SqlStore

from .conftest import StoreFactory

OWNER = "elsewhere:42:7"
#: Every table that holds a session's content, and how its rows name the session.
TABLES = {
    "turns": "session_id = ?",
    "messages": "turn_num IN (SELECT num FROM turns WHERE session_id = ?)",
    "tool_calls": "turn_num IN (SELECT num FROM turns WHERE session_id = ?)",
    "partial_text": "session_id = ?",
    "events": "session_num = (SELECT num FROM sessions WHERE id = ?)",
    "permission_grants": "session_id = ?",
}


async def _counts(store: Store, session_id: str) -> dict[str, int]:
    assert isinstance(store, SqlStore)
    out = {}
    for table, where in TABLES.items():
        query = rows(f"SELECT COUNT(*) AS n FROM {table} WHERE {where}", session_id)
        found = await store.connection.perform(query, "read")
        out[table] = int(found[0]["n"])
    return out


async def _full_session(store: Store, session_id: str) -> str:
    """A session holding some of everything: a finished turn with a tool call, its messages and
    events, a grant, and streamed text; returns the id of a second turn, left running."""
    await store.create_session(session_id=session_id, workdir="/w", model="m")
    first = await store.begin_turn(session_id, user_message("read it"), OWNER, 30)
    use = ToolUseBlock(id="c1", name="read_file", input={"path": "a"})
    await writes.append_message(
        store, first.id, assistant_message([TextBlock(text="Reading."), use])
    )
    await writes.upsert_tool_call(
        store, first.id, "c1", call_index=0, name="read_file", state="output-available", output="A"
    )
    results = tool_result_message([ToolResultBlock(tool_use_id="c1", content="A")])
    await writes.append_message(store, first.id, results)
    await writes.append_event(store, session_id, first.id, {"type": "step_started", "step": 1})
    await writes.end_turn(store, first.id, "completed", event={"type": "done", "text": "A"})
    await store.add_grant(session_id, "bash")
    second = await store.begin_turn(session_id, user_message("go on"), OWNER, 30)
    await writes.append_partial_text(store, second.id, 1, 0, "half an ans")
    return second.id


async def test_find_sessions_by_the_start_of_their_id(store: Store) -> None:
    for session_id in ("abc1", "abc2", "abd", "ab", "a_c", "a%d", "b", "éa"):
        await store.create_session(session_id=session_id, workdir="/w", model="m")
    assert [s.id for s in await store.find_sessions("ab")] == ["ab", "abc1", "abc2", "abd"]
    assert [s.id for s in await store.find_sessions("abc")] == ["abc1", "abc2"]
    assert [s.id for s in await store.find_sessions("abc2")] == ["abc2"]
    assert [s.id for s in await store.find_sessions("ab", limit=2)] == ["ab", "abc1"]
    # No pattern characters: "_" and "%" are themselves.
    assert [s.id for s in await store.find_sessions("a_")] == ["a_c"]
    assert [s.id for s in await store.find_sessions("a%")] == ["a%d"]
    assert [s.id for s in await store.find_sessions("é")] == ["éa"]
    assert await store.find_sessions("abc3") == []
    assert await store.find_sessions("c") == []
    found = await store.find_sessions("b")
    assert found == [await store.get_session("b")]


async def test_rename_session_keeps_the_title_over_later_turns(store: Store) -> None:
    session = await store.create_session(workdir="/w", model="m")
    await store.rename_session(session.id, "Fix the parser")
    turn = await store.begin_turn(session.id, user_message("first prompt"), OWNER, 30)
    await writes.end_turn(store, turn.id, "completed")
    renamed = await store.get_session(session.id)
    assert renamed is not None and renamed.title == "Fix the parser"
    assert renamed.updated_at >= session.updated_at
    with pytest.raises(StoreError, match="no session missing"):
        await store.rename_session("missing", "x")


async def test_delete_session_takes_everything_and_nothing_else(store: Store) -> None:
    running = await _full_session(store, "doomed")
    await _full_session(store, "kept")
    before = await _counts(store, "kept")
    assert all(before.values()), before  # the check below covers every table

    # While a turn runs nothing goes.
    with pytest.raises(SessionBusyError) as busy:
        await store.delete_session("doomed")
    assert busy.value.turn_id == running
    assert await _counts(store, "doomed") == before

    await writes.end_turn(store, running, "interrupted")
    # A streamed-text row left without its turn running (as an older journal may hold).
    assert isinstance(store, SqlStore)
    await store.connection.perform(
        execute(
            "INSERT INTO partial_text (turn_id, session_id, step, block_index, text, "
            "created_at) VALUES (?, ?, 1, 0, 'left', 0)",
            running,
            "doomed",
        ),
        "write",
    )
    assert await store.delete_session("doomed") is True
    assert await store.get_session("doomed") is None
    assert await _counts(store, "doomed") == dict.fromkeys(TABLES, 0)
    assert await store.events_after("doomed") == []
    assert await store.grants("doomed") == []
    assert await store.delete_session("doomed") is False
    # The other session is whole, and the id can be used again.
    assert await _counts(store, "kept") == before
    assert [s.id for s in await store.list_sessions()] == ["kept"]
    await store.create_session(session_id="doomed", workdir="/w", model="m")
    assert await store.last_event_seq("doomed") == 0


async def test_running_usage_is_the_turns_last_usage_report(store: Store) -> None:
    session = await store.create_session(workdir="/w", model="m")
    turn = await store.begin_turn(session.id, user_message("one"), OWNER, 30)

    def report(total_in: int, total_out: int) -> dict[str, object]:
        usage = Usage(input_tokens=total_in, output_tokens=total_out)
        return event_to_dict(UsageReport(usage=usage, total_input=total_in, total_output=total_out))

    await writes.append_event(store, session.id, turn.id, report(10, 4))
    await writes.end_turn(
        store, turn.id, "completed", usage=Usage(input_tokens=10, output_tokens=4)
    )
    second = await store.begin_turn(session.id, user_message("two"), OWNER, 30)
    await writes.append_event(store, session.id, second.id, {"type": "step_started", "step": 1})
    # The first turn's report is not the second's.
    assert await store.running_usage(session.id, second.id) is None
    await writes.append_event(store, session.id, second.id, report(100, 20))
    await writes.append_event(store, session.id, second.id, {"type": "step_started", "step": 2})
    await writes.append_event(store, session.id, second.id, report(250, 45))
    await writes.append_partial_text(store, second.id, 2, 0, "more text")
    await writes.append_event(store, session.id, second.id, {"type": "step_started", "step": 3})
    assert await store.running_usage(session.id, second.id) == Usage(
        input_tokens=250, output_tokens=45, partial=True
    )
    assert await store.running_usage("missing", second.id) is None


async def test_find_sessions_reads_an_index(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """The prefix lookup is a range on an index of the ids, not a scan of every session: the
    statement ``find_sessions`` sends is explained by the database itself."""
    assert isinstance(store, SqlStore)
    # The statement the plan sends (its first and only step).
    query = next(sql_sessions.find_sessions(store.dialect, "ab", 10))
    sql, params = query.sql, query.params
    await store.find_sessions("ab")
    if store.dialect.name == "sqlite":
        plan = await store.connection.perform(rows("EXPLAIN QUERY PLAN " + sql, *params), "read")
        details = [str(r["detail"]) for r in plan]
        assert any("USING INDEX" in d and "id>" in d for d in details), details
    else:

        def explain() -> Plan[list[str]]:
            yield from execute("SET LOCAL enable_seqscan = off")
            found = yield from rows("EXPLAIN " + sql, *params)
            return [str(next(iter(dict(r).values()))) for r in found]

        lines = await store.connection.perform(explain(), "snapshot")
        assert any("sessions_by_id_bytes" in line for line in lines), lines


async def test_two_stores_opening_one_new_id_at_once_get_one_session(
    make_store: StoreFactory,
) -> None:
    """A session under an id a client chose, opened by two stores (two server processes) at
    the same moment: one makes it, with its owner; the other gets that session and sees its
    owner — neither fails, and no one sees it without its owner."""
    async with make_store() as one, make_store() as two:
        for n in range(20):
            sid = f"client-chosen-{n}"
            a, b = await asyncio.gather(
                one.open_session(sid, workdir="/w", model="m", owner="alpha"),
                two.open_session(sid, workdir="/w", model="m", owner="beta"),
            )
            assert [a[1], b[1]].count(True) == 1, (a, b)
            winner = "alpha" if a[1] else "beta"
            assert a[0].owner == b[0].owner == winner
            stored = await one.get_session(sid)
            assert stored is not None and stored.owner == winner
        # An id already taken: the stored session, untouched.
        again, made = await two.open_session("client-chosen-0", workdir="/x", model="n")
        assert not made and again.workdir == "/w" and again.owner is not None
