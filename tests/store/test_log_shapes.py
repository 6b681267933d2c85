"""The log's frequent payloads are stored as their values and read back as the event that went
out: same keys, same order, same values — and anything else is stored as it was."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from drover.core.events import (
    AssistantMessage,
    Done,
    StepStarted,
    TextDelta,
    ToolDone,
    ToolResults,
    ToolStart,
    ToolStateChanged,
    TurnStarted,
    UsageReport,
)
from drover.core.messages import (
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    assistant_message,
    tool_result_message,
    user_message,
)
from drover.errors import StoreError
from drover.journal.journal import Journal
from drover.runtime.hub import Frame, make_frame
from drover.server.replay import expand
from drover.store.sql.log_shapes import SHAPES, pack, unpack
from drover.store.sqlite.store import SqliteStore

#: The types whose every row a tool loop logs packed (all but a turn's first and last rows).
FREQUENT = {
    "step_started",
    "usage",
    "text_delta",
    "assistant_message",
    "tool_state",
    "tool_start",
    "tool_done",
    "tool_results",
}


def _example(kind: str, entries: tuple[Any, ...]) -> dict[str, Any]:
    """A payload of the shape ``(kind, entries)``, each value distinct and of another JSON kind
    than its neighbours (a swapped pair would not compare equal)."""
    values: list[Any] = [7, "text ✓ \u2028", None, {"n": [1, 2.5]}, True, [], 0.25, False]
    body: dict[str, Any] = {"type": kind}
    for i, entry in enumerate(entries):
        if isinstance(entry, tuple):
            key, keys = entry
            body[key] = {k: values[(i + j) % len(values)] for j, k in enumerate(keys)}
        else:
            body[entry] = values[i % len(values)]
    return body


@pytest.mark.parametrize(("index", "shape"), list(enumerate(SHAPES)))
def test_each_shape_reads_back_with_its_keys_in_order(index: int, shape: Any) -> None:
    kind, entries = shape
    body = _example(kind, entries)
    packed = pack(kind, body)
    assert packed is not None and packed[0] == index
    stored = json.loads(json.dumps(packed))
    read = unpack(kind, stored)
    assert list(read.items()) == list(body.items())


def test_any_other_payload_is_not_packed() -> None:
    usage = {"input_tokens": 1, "output_tokens": 2, "cache_read_tokens": 0}
    usage |= {"cache_write_tokens": 0, "partial": False}
    report = {"type": "usage", "usage": usage, "total_input": 1, "total_output": 2}
    assert pack("usage", report) is not None
    others: list[tuple[str, dict[str, Any]]] = [
        ("usage", {**report, "extra": 1}),  # a key more
        ("usage", {k: v for k, v in report.items() if k != "total_output"}),  # a key less
        ("usage", {"type": "usage", "total_input": 1, "usage": usage, "total_output": 2}),
        ("usage", {**report, "usage": {**usage, "more": 1}}),  # the nested object differs
        ("usage", {**report, "usage": [1, 2, 0, 0, False]}),  # not an object
        ("note", {"type": "note", "step": 1}),  # a type without shapes
        ("step_started", {"step": 1, "type": "step_started"}),  # type not first
    ]
    for kind, body in others:
        assert pack(kind, body) is None, body


def test_a_row_naming_a_shape_this_version_lacks_is_refused() -> None:
    with pytest.raises(StoreError, match="shape 9999"):
        unpack("usage", [9999, 1, 2])
    step = SHAPES.index(("step_started", ("step",)))
    with pytest.raises(StoreError, match="does not have for that type"):
        unpack("usage", [step, 1])  # another type's shape
    with pytest.raises(StoreError, match="values for a shape"):
        unpack("step_started", [step, 1, 2])
    with pytest.raises(StoreError, match="not an event"):
        unpack("step_started", "step")


async def _tool_loop(
    store: Any, publish: Callable[[int, str | None, dict[str, Any], int], None]
) -> str:
    """Two steps of a tool loop through the journal: a long output, a short failed one, a
    sandboxed start, partial and final usage, streamed text, the answer."""
    session = await store.create_session(workdir="/w", model="m")
    turn = await store.begin_turn(session.id, user_message("read"), "h:1:1", 30)
    journal = Journal(
        store,
        session.id,
        publish=publish,
    )
    await journal.send(TurnStarted(turn_id=turn.id, session_id=session.id, user_message=None))
    outputs = [("page " * 400, False), ("no such page", True)]
    total = 0
    for step, (output, failed) in enumerate(outputs, start=1):
        await journal.send(StepStarted(step=step))
        total += 10
        await journal.send(
            UsageReport(usage=Usage(input_tokens=10, partial=True), **_totals(total))
        )
        for word in ("Reading ", "the ", "page."):
            await journal.send(TextDelta(text=word))
        call = ToolUseBlock(id=f"toolu_{step}", name="fetch", input={"n": step})
        text = TextBlock(text="Reading the page.")
        await journal.send(AssistantMessage(message=assistant_message([text, call])))
        await journal.send(UsageReport(usage=Usage(input_tokens=10), **_totals(total)))
        base = {"call_id": call.id, "call_index": 0, "name": "fetch"}
        await journal.send(ToolStateChanged(**base, state="input-streaming"))
        await journal.send(ToolStateChanged(**base, state="input-available", input=call.input))
        await journal.send(ToolStateChanged(**base, state="running", input=call.input))
        sandbox = "workdir" if step == 2 else None
        summary = f"fetch {step}"
        await journal.send(
            ToolStart(
                call_index=0, id=call.id, name="fetch", input_summary=summary, sandbox=sandbox
            )
        )
        state = "output-error" if failed else "output-available"
        await journal.send(ToolStateChanged(**base, state=state, output=output, is_error=failed))
        done = ToolDone(call_index=0, id=call.id, name="fetch", is_error=failed, output_summary="…")
        await journal.send(done)
        result = ToolResultBlock(tool_use_id=call.id, content=output, is_error=failed)
        await journal.send(ToolResults(message=tool_result_message([result])))
    await journal.send(StepStarted(step=3))
    await journal.send(AssistantMessage(message=assistant_message([TextBlock(text="Done.")])))
    await journal.send(Done(text="Done.", usage=Usage(input_tokens=30)))
    await journal.aclose()
    return session.id


def _totals(total: int) -> dict[str, int]:
    return {"total_input": total, "total_output": 0}


async def test_a_tool_loop_reads_back_as_it_went_out(store: Any) -> None:
    """Every row of the log (packed on SQLite, whole in ``jsonb``) comes back as the event a
    live client was sent, key order included: a replayed frame is the live frame."""
    published: list[Frame] = []
    session_id = await _tool_loop(store, lambda *sent: published.append(make_frame(*sent)))
    replayed = expand(await store.events_after(session_id), 0)
    assert [f.wire for f in replayed] == [f.wire for f in published]


async def test_a_tool_loop_logs_its_frequent_rows_as_values(tmp_path: Path) -> None:
    """On SQLite, every row of the frequent types is a list of values (so the shapes follow the
    events' forms as the journal writes them), and the others are objects without ``type``."""
    path = tmp_path / "journal.db"
    async with SqliteStore(path) as store:
        await _tool_loop(store, lambda *_: None)
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT type, payload FROM events ORDER BY seq").fetchall()
    finally:
        conn.close()
    assert {kind for kind, _ in rows} >= FREQUENT
    for kind, payload in rows:
        stored = json.loads(payload)
        if kind in FREQUENT:
            assert isinstance(stored, list), (kind, payload)
        else:
            assert isinstance(stored, dict) and "type" not in stored, (kind, payload)
