"""Numbers and replay in process: every delta numbered and published, coalesced rows cut back
at any delta, redacted rows that cannot be cut, superseded deltas written, crash holes reset."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from support.sse import split_lines
from support.writes import end_turn

from drover.core.events import (
    AssistantMessage,
    Done,
    Retry,
    StepStarted,
    TextDelta,
    TurnStarted,
)
from drover.core.messages import TextBlock, Usage, assistant_message, user_message
from drover.journal.journal import Journal
from drover.journal.numbering import RESERVE_BLOCK
from drover.runtime.hub import Frame, SessionFeed, make_frame
from drover.server.replay import backlog, continuable, expand
from drover.store.sqlite.store import SqliteStore

Published = list[tuple[int, str | None, dict[str, Any]]]


def _parsed(frames: list[Frame]) -> list[tuple[int, dict[str, Any]]]:
    """``(id, data)`` of each frame, read back from its bytes as a client would."""
    out = []
    for frame in frames:
        lines = split_lines(frame.encode().decode())
        assert lines[0] == f"id: {frame.seq}" and lines[1] == f"event: {frame.type}"
        out.append((frame.seq, json.loads(lines[2].removeprefix("data: "))))
    return out


class Rig:
    def __init__(self, store: SqliteStore, session_id: str, turn_id: str) -> None:
        self.store, self.session_id, self.turn_id = store, session_id, turn_id
        self.published: Published = []
        self.prevs: dict[int, int] = {}
        # Flushes by size only (the timer is far away): every 16 bytes.
        self.journal = Journal(
            store,
            session_id,
            flush_interval=1000,
            flush_bytes=16,
            publish=self._publish,
        )

    def _publish(self, seq: int, turn: str | None, payload: dict[str, Any], prev: int) -> None:
        self.published.append((seq, turn, payload))
        self.prevs[seq] = prev

    async def start(self) -> None:
        await self.journal.send(
            TurnStarted(turn_id=self.turn_id, session_id=self.session_id, user_message=None)
        )
        await self.journal.send(StepStarted(step=1))

    async def deltas(self, *texts: str) -> None:
        for text in texts:
            await self.journal.send(TextDelta(text=text))

    def delta_ids(self) -> list[int]:
        return [seq for seq, _, p in self.published if p["type"] == "text_delta"]

    async def rows(self, after: int = 0) -> list[Any]:
        return await self.store.events_after(self.session_id, max(after - 1, 0))


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    store = SqliteStore(tmp_path / "j.db")
    await store.open()
    session = await store.create_session(workdir="/w", model="m")
    turn = await store.begin_turn(session.id, user_message("hi"), "h:1:1", 30)
    rig = Rig(store, session.id, turn.id)
    await rig.start()
    yield rig
    await store.close()


async def test_every_event_is_numbered_and_published_in_order(rig: Rig) -> None:
    await rig.deltas("one ", "two ")
    # Each delta is handed on as it arrives, before any gate lets the journal write it.
    assert [p["text"] for _, _, p in rig.published[2:]] == ["one ", "two "]
    assert not [r for r in await rig.rows() if r.type == "text_delta"]
    await rig.deltas("three ")
    seqs = [seq for seq, _, _ in rig.published]
    assert seqs == list(range(1, len(seqs) + 1))
    assert [p["text"] for _, _, p in rig.published[2:]] == ["one ", "two ", "three "]


async def test_a_replay_can_start_after_any_flushed_delta(rig: Rig) -> None:
    # Key-like runs are held back by the redactor, and with them the rest of their delta: a
    # row ends where a delta ends, never inside one.
    texts = ["hello abcdefgh", "ijkl", " more stuff ", "and", " x y z w v u ", "q", "end "]
    await rig.deltas(*texts)
    await rig.journal.send(StepStarted(step=2))  # flushed nothing more: ids past the last flush
    live = {seq: p for seq, _, p in rig.published if p["type"] == "text_delta"}
    rows = await rig.rows()
    coalesced = [r for r in rows if r.type == "text_delta"]
    assert any(len(r.marks or ()) > 1 for r in coalesced)  # several deltas in one row
    for row in coalesced:
        assert row.marks and row.marks[-1] == (row.end_seq, len(row.payload["text"]))
    flushed = [seq for r in coalesced for seq, _ in r.marks or ()]
    for k in [0, *flushed]:
        got = _parsed(expand(await rig.rows(k), k))
        pieces = [(seq, p["text"]) for seq, p in got if p["type"] == "text_delta"]
        expected = [(seq, live[seq]["text"]) for seq in flushed if seq > k]
        assert pieces == expected, f"after {k}"
        assert continuable(k, await rig.rows(k), None)


async def test_unflushed_deltas_come_from_the_feed(rig: Rig) -> None:
    feed = SessionFeed()
    await rig.deltas("a b c d e f g h i j k ", "tail ", "x")
    for seq, turn, payload in rig.published:
        feed.publish(make_frame(seq, turn, payload, rig.prevs[seq]))
    ids = rig.delta_ids()
    for k in [0, *ids]:
        plan = backlog(k, await rig.rows(k), feed)
        assert not plan.reset
        got = [f.seq for f in plan.frames]
        assert got == [seq for seq, _, _ in rig.published if seq > k]


async def test_a_row_redaction_shortened_cannot_be_cut_inside(rig: Rig) -> None:
    secret = "sk-ant-" + "a1b2c3d4e5" * 4
    await rig.deltas("key ", secret[:20], secret[20:], " ok ", "done ")
    await rig.journal.aclose()
    rows = await rig.rows()
    redacted = [r for r in rows if "[REDACTED]" in str(r.payload.get("text"))]
    assert len(redacted) == 1
    (row,) = redacted
    assert row.seq < row.end_seq
    # Offsets inside it cannot be mapped: at most its end is marked (a delta ends there).
    assert row.marks in (None, ((row.end_seq, len(row.payload["text"])),))
    assert not continuable(row.seq, rows, None)  # inside: reset
    assert continuable(row.end_seq, rows, None) == (row.marks is not None)
    assert secret not in str(_parsed(expand(rows, 0)))


async def test_deltas_a_redacted_row_holds_are_replayed_once(rig: Rig) -> None:
    # The ring still holds every live delta (the turn runs), and the log a row redaction
    # shortened, which holds several of them as one event: each is served once, from the log.
    feed = SessionFeed()
    secret = "sk-ant-" + "a1b2c3d4e5" * 4
    await rig.deltas("key ", secret[:20], secret[20:], " ok ", "done ")
    await rig.journal.aclose()
    for seq, turn, payload in rig.published:
        feed.publish(make_frame(seq, turn, payload, rig.prevs[seq]))
    plan = backlog(0, await rig.rows(), feed)
    served = [p for _, p in _parsed(plan.frames) if p["type"] == "text_delta"]
    assert "".join(p["text"] for p in served) == "key [REDACTED] ok done "
    ids = [f.seq for f in plan.frames]
    assert ids == sorted(set(ids))


async def test_superseded_deltas_are_written_before_what_supersedes_them(rig: Rig) -> None:
    await rig.deltas("first attempt")  # 13 bytes: not flushed
    unflushed = rig.delta_ids()
    await rig.journal.send(Retry(attempt=1, delay=0, error="overloaded", discard_partial=True))
    await rig.deltas("again")
    message = assistant_message([TextBlock(text="again")])
    await rig.journal.send(AssistantMessage(message=message))
    await rig.journal.send(Done(text="again", usage=Usage()))
    await rig.journal.aclose()
    rows = await rig.rows()
    for k in [*unflushed, *rig.delta_ids()]:
        assert continuable(k, rows, None), k
    # Every event published is replayed at its number, with the data it was published with.
    replayed = _parsed(expand(rows, 0))
    published = [
        (seq, {**p, "seq": seq, "prev": rig.prevs[seq], "turn_id": t})
        for seq, t, p in rig.published
    ]
    assert replayed == published
    retry = next(r for r in rows if r.type == "retry")
    assert retry.seq == unflushed[-1] + 1
    after = [p["type"] for _, p in _parsed(expand(rows, unflushed[0]))]
    assert after == ["retry", "text_delta", "assistant_message", "done"]
    # The reservation shrinks back to the numbers handed out once the turn ended in order.
    assert await rig.store.next_event_seq(rig.session_id) == rig.published[-1][0] + 1


async def test_numbers_lost_in_a_crash_fall_in_a_hole_recovery_numbers_past(
    rig: Rig,
) -> None:
    await rig.deltas("sixteen bytes!! ", "lost ", "also lost ")
    last_flushed = max(seq for r in await rig.rows() for seq, _ in r.marks or ())
    lost = [seq for seq in rig.delta_ids() if seq > last_flushed]
    assert lost
    # The process dies: no flush, no end. Another process recovers the turn.
    (recovered,) = await rig.store.recover_orphans(is_alive=lambda owner: False)
    rows = await rig.rows()
    tail = [r for r in rows if r.turn_id == recovered and r.seq > rig.published[-1][0]]
    assert [r.type for r in tail] == ["assistant_message", "incomplete"]
    assert tail[0].seq == RESERVE_BLOCK + 1  # after the dead journal's reservation
    for k in lost:
        assert not continuable(k, await rig.rows(k), None)
    assert continuable(last_flushed, await rig.rows(last_flushed), None)


async def test_a_turn_after_a_hole_names_the_last_event_the_log_holds(rig: Rig) -> None:
    await rig.deltas("one ", "two ")
    message = assistant_message([TextBlock(text="one two ")])
    await rig.journal.send(AssistantMessage(message=message))
    await rig.journal.send(Done(text="one two ", usage=Usage()))
    await rig.journal.aclose()
    last = rig.published[-1][0]
    assert [rig.prevs[seq] for seq, _, _ in rig.published] == list(range(last))
    # Numbers reserved and never used (a journal that died before its first write, say).
    await rig.store.reserve_seqs(rig.session_id, last + 40)
    turn = await rig.store.begin_turn(rig.session_id, user_message("again"), "h:1:1", 30)
    after = Rig(rig.store, rig.session_id, turn.id)
    await after.start()
    (first, _, _), (second, _, _) = after.published
    assert first == last + 41 and after.prevs[first] == last  # across the hole
    assert after.prevs[second] == first
    # Events a store numbers on its own (a turn ended without its journal) say it too: the
    # last the log holds (turn_started; step_started was never written).
    logged = await end_turn(
        rig.store, turn.id, "interrupted", event={"type": "error", "reason": "interrupted"}
    )
    assert [r.prev for r in logged] == [first]
    assert logged[0].seq > second
    # A replay from the start names the same numbers.
    frames = _parsed(expand(await rig.rows(), 0))
    prevs = [p["prev"] for _, p in frames]
    assert prevs == [0, *(seq for seq, _ in frames[:-1])]
    assert dict(frames)[first]["prev"] == last
