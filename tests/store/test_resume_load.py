"""``load_history`` on a real journal: stored tool calls are read only when a result is missing."""

from __future__ import annotations

from pathlib import Path

from support.writes import append_message, end_turn, upsert_tool_call

from drover.core.events import MAY_HAVE_RUN_TEXT
from drover.core.messages import (
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    assistant_message,
    tool_result_message,
    user_message,
)
from drover.runtime.runner import load_history
from drover.store.sqlite.store import SqliteStore


class CountingStore(SqliteStore):
    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.call_loads: list[str | None] = []

    async def tool_calls(self, turn_id=None, *, session_id=None):  # type: ignore[no-untyped-def]
        self.call_loads.append(turn_id)
        return await super().tool_calls(turn_id, session_id=session_id)


def use(call_id: str) -> ToolUseBlock:
    return ToolUseBlock(id=call_id, name="bash", input={"command": call_id})


async def test_resume_reads_the_calls_of_the_turns_that_need_them(tmp_path: Path) -> None:
    async with CountingStore(tmp_path / "j.db") as store:
        session = await store.create_session(workdir=str(tmp_path), model="m")
        owner = "host:1:1"
        done = await store.begin_turn(session.id, user_message("one"), owner, 30.0)
        await append_message(store, done.id, assistant_message([use("a")]))
        await append_message(
            store, done.id, tool_result_message([ToolResultBlock(tool_use_id="a", content="A")])
        )
        await append_message(store, done.id, assistant_message([TextBlock(text="ok")]))
        await end_turn(store, done.id, "completed")
        history = await load_history(store, session.id)
        assert store.call_loads == []  # every result present: no call read
        assert len(history.committed) == 4 and history.pending == []

        # The next turn is cut while its calls run: one finished (its output recorded, the
        # results message never written), one still running.
        cut = await store.begin_turn(session.id, user_message("two"), owner, 30.0)
        await append_message(store, cut.id, assistant_message([use("b"), use("c")]))
        await upsert_tool_call(
            store,
            cut.id,
            "b",
            call_index=0,
            name="bash",
            state="output-available",
            output="B",
            step=1,
        )
        await upsert_tool_call(store, cut.id, "c", call_index=1, name="bash", state="running")
        await store.recover_orphans(lambda _owner: False)
        history = await load_history(store, session.id)
        assert store.call_loads == [cut.id]
        results = history.pending[-1].tool_results
        assert [(r.content, r.is_error) for r in results] == [
            ("B", False),
            (MAY_HAVE_RUN_TEXT, True),
        ]
