"""What a live client saw is what a replay serves, and a client can tell a gap on its own.

Against a real ``drover serve`` on the fake LLM: a client follows turns live, then a replay
``?after=0`` must serve every numbered event it saw — same id, same type, same data — and
each event's ``prev`` must name the event before it, so that a client that missed one (or
holds a number the log lost) can see it without the server's help. The documented exception:
a live ``text_delta`` carries the provider's text as it came while the log holds it redacted,
so deltas inside a flush that redaction changed are replayed as that one row.

After ``kill -9`` of the server mid-stream, the deltas published but not written are lost and
recovery numbers its events after the dead process's reservation: a client holding a lost
number is sent a ``reset``, never the events after the hole as if nothing were missing. (A
flush writes whole deltas only: the delta whose end it held back is lost whole, not cut.)
"""

from __future__ import annotations

import json
import signal
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from server.conftest import serve
from server.support import (
    TERMINAL,
    Served,
    Sse,
    parse_sse,
    read_events,
    tool_turn_script,
)
from support.sse import sse_lines

from drover.core.events import (
    AssistantMessage,
    Done,
    StepStarted,
    TextDelta,
    TurnStarted,
    WorkerEvent,
)
from drover.core.messages import TextBlock, Usage, assistant_message, user_message
from drover.journal.journal import Journal
from drover.server.replay import expand
from drover.store.sqlite.store import SqliteStore
from drover.testing.server import FakeLLMServer

BOUND = 60.0  # seconds: a failure bound, never a synchronisation
#: The server tests' fixture (a real ``drover serve`` on the fake LLM), found by pytest here.
FIXTURES = (serve,)
SECRET = "sk-ant-api03-" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2" * 2


class Follower(threading.Thread):
    """A client following a session live from its start until ``turns`` turns ended."""

    def __init__(self, server: Served, sid: str, turns: int = 1) -> None:
        super().__init__(daemon=True)
        self.server, self.sid, self.turns = server, sid, turns
        self.events: list[Sse] = []
        self.subscribed = threading.Event()
        self.seen = threading.Condition()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with self.server.client() as client:
                url = f"/v1/sessions/{self.sid}/events"
                with client.stream("GET", url, timeout=BOUND) as response:
                    ended = 0
                    for ev in parse_sse(sse_lines(response)):
                        if ev.event == "status":
                            self.subscribed.set()
                            continue
                        with self.seen:
                            self.events.append(ev)
                            self.seen.notify_all()
                        ended += ev.event in TERMINAL
                        if ended == self.turns:
                            return
        except BaseException as exc:  # the server may be killed under it: see result()
            self.error = exc
        finally:
            self.subscribed.set()

    def wait_for(self, test: Callable[[list[Sse]], bool]) -> None:
        with self.seen:
            assert self.seen.wait_for(lambda: test(self.events), BOUND), "event never came"

    def result(self) -> list[Sse]:
        self.join(BOUND)
        assert not self.is_alive(), "the stream never ended"
        return self.events


def _session(server: Served) -> str:
    with server.client() as client:
        return str(client.post("/v1/sessions", json={}).json()["id"])


def _post(server: Served, sid: str, content: str) -> None:
    with server.client() as client:
        reply = client.post(f"/v1/sessions/{sid}/messages", json={"content": content})
        assert reply.status_code == 202, reply.text


def _check_prev_chain(events: list[Sse], start: int) -> None:
    """Each event names the one before it; the first names ``start``."""
    before = start
    for ev in events:
        assert ev.data["prev"] == before, f"event {ev.id} ({ev.event}) says prev {ev.data}"
        before = ev.id or before


def _two_turns(fake_llm: FakeLLMServer, server: Served) -> tuple[list[Sse], list[Sse]]:
    """A tool turn, then an answer holding a secret, followed live from the session's start;
    then everything read again with ``?after=0``."""
    secret_text = "Your key is " + SECRET + " — keep it safe. " + "More words here. " * 20
    fake_llm.script(
        *tool_turn_script(900, delay=0.002),
        {"text": secret_text, "delay": 0.002},
    )
    sid = _session(server)
    live = Follower(server, sid, turns=2)
    live.start()
    assert live.subscribed.wait(BOUND)
    _post(server, sid, "go")
    live.wait_for(lambda got: any(e.event in TERMINAL for e in got))
    _post(server, sid, "and the key?")
    seen = live.result()
    assert live.error is None, live.error
    with server.client() as client:
        replayed = read_events(
            client, sid, after=0, until=lambda ev, got: sum(e.event in TERMINAL for e in got) == 2
        )
    assert all(e.id is not None for e in seen + replayed)
    return seen, replayed


def test_every_event_a_live_client_saw_is_replayed_with_its_id_type_and_data(
    fake_llm: FakeLLMServer, serve: Callable[..., Served]
) -> None:
    seen, replayed = _two_turns(fake_llm, serve())
    by_id = {e.id: e for e in replayed}
    first_turn = seen[0].data["turn_id"]
    redacted_rows = [i for i, e in enumerate(replayed) if "[REDACTED]" in str(e.data.get("text"))]
    assert redacted_rows, "the second turn's secret was not redacted in the log"
    # The live deltas a redacted row holds: those after the event before it, up to it.
    inside_redacted = {
        e.id
        for i in redacted_rows
        for e in seen
        if e.event == "text_delta"
        and (replayed[i - 1].id or 0) < (e.id or 0) <= (replayed[i].id or 0)
    }
    differing = []
    for ev in seen:
        got = by_id.get(ev.id)
        if got is None or got.event != ev.event or got.data != ev.data:
            differing.append(ev)
    # The first turn (no secret) is replayed exactly; in the second only the deltas of the
    # redacted flush differ (the log holds them redacted, as one event).
    assert not [e for e in differing if e.data["turn_id"] == first_turn]
    assert all(e.event == "text_delta" and e.id in inside_redacted for e in differing), [
        (e.id, e.event) for e in differing
    ]
    assert set(by_id) <= {e.id for e in seen}, "the replay holds events never sent live"
    assert SECRET not in str([e.data for e in replayed])
    assert sum(e.event == "text_delta" for e in seen if e.data["turn_id"] == first_turn) > 100


def test_each_event_names_the_one_before_it_live_and_in_a_replay(
    fake_llm: FakeLLMServer, serve: Callable[..., Served]
) -> None:
    server = serve()
    seen, replayed = _two_turns(fake_llm, server)
    # A client can tell a gap on its own: every event names the one before it, across turns,
    # live as in a replay from the start.
    _check_prev_chain(seen, 0)
    _check_prev_chain(replayed, 0)
    # A replay from any id goes on from that id.
    sid = seen[0].data["session_id"]
    with server.client() as client:
        ids = [e.id or 0 for e in replayed]
        # (from ids the log holds at least three events after: the turns are over, so a replay
        # from closer to the end would wait for events that never come)
        for k in ids[: len(ids) - 3 : 97]:
            rest = read_events(client, sid, last_event_id=k, until=lambda ev, got: len(got) == 3)
            assert rest[0].data["prev"] == k, f"after {k}"
            _check_prev_chain(rest, k)


async def test_a_workers_text_is_published_as_the_log_holds_it(tmp_path: Path) -> None:
    async with SqliteStore(tmp_path / "journal.db") as store:
        session = await store.create_session(workdir="/w", model="m")
        turn = await store.begin_turn(session.id, user_message("go"), "h:1:1", 30)
        published: list[tuple[int, str | None, dict[str, Any], int]] = []
        journal = Journal(
            store,
            session.id,
            turn_id=turn.id,
            flush_bytes=32,
            publish=lambda *event: published.append(event),
        )
        await journal.send(TurnStarted(turn_id=turn.id, session_id=session.id, user_message=None))
        await journal.send(StepStarted(step=1))
        words = [f"w{i:02d} " for i in range(30)]
        for event in [
            TurnStarted(turn_id="w", session_id=session.id, user_message=None),
            StepStarted(step=1),
            *(TextDelta(text=word) for word in words),
            AssistantMessage(message=assistant_message([TextBlock(text="".join(words))])),
            Done(text="".join(words), usage=Usage()),
        ]:
            await journal.send(WorkerEvent(call_id="task-1", worker=0, event=event))
        await journal.send(Done(text="", usage=Usage()))
        await journal.aclose()
        rows = await store.events_after(session.id)
        frames = expand(rows, 0)
        assert [f.seq for f in frames] == [seq for seq, *_ in published]
        for frame, (seq, turn_id, payload, prev) in zip(frames, published, strict=True):
            data = json.loads(frame.wire.decode().split("data: ", 1)[1])
            assert data == {**payload, "seq": seq, "prev": prev, "turn_id": turn_id}


def test_after_sigkill_a_client_holding_a_lost_number_is_reset(
    fake_llm: FakeLLMServer, serve: Callable[..., Served], tmp_path: Path
) -> None:
    # Every delta ends in a key-like run ("abc"), which a flush holds back — with the rest of
    # its delta: each flushed row ends where the delta before that one ends.
    fake_llm.script({"text": "".join(f"{i:04d} abc" for i in range(4000)), "delay": 0.003})
    fake_llm.allow_unexpected = True
    server = serve()
    sid = _session(server)
    live = Follower(server, sid)
    live.start()
    assert live.subscribed.wait(BOUND)
    _post(server, sid, "go")
    live.wait_for(lambda got: sum(e.event == "text_delta" for e in got) >= 300)
    server.stop(signal.SIGKILL)
    seen = live.result()

    restarted = serve("--takeover", "end")  # recovers the turn as it starts, resumes nothing
    db = sqlite3.connect(tmp_path / "journal.db")
    try:
        (cut,) = db.execute(
            "SELECT MAX(last_seq) FROM events WHERE session_num = (SELECT num FROM sessions "
            "WHERE id = ?) AND type = 'text_delta'",
            (sid,),
        ).fetchone()
    finally:
        db.close()
    deltas = [e.id for e in seen if e.event == "text_delta"]
    assert cut in deltas, "the client saw the last delta the last flush wrote"
    assert cut + 1 in deltas, "and the one whose end the flush held back"
    with restarted.client() as client:
        everything = read_events(client, sid, after=0)
        served = [e.id for e in everything]
        # The log jumps from the last delta written (whole) to what recovery logged after the
        # hole.
        assert cut in served and cut + 1 not in served
        resumed = everything[served.index(cut) + 1]
        assert resumed.event == "assistant_message"
        assert (resumed.id or 0) > deltas[-1]
        durable = everything[-1].id

        # A client holding a lost number is told to reset.
        for lost in sorted({cut + 1, deltas[-1]}):
            answer = read_events(
                client,
                sid,
                last_event_id=lost,
                until=lambda ev, got: ev.event == "reset" or ev.event in TERMINAL,
            )
            assert [e.event for e in answer] == ["reset"], f"after lost id {lost}: {answer}"
            assert answer[0].id == durable
            assert answer[0].data["turns"][0]["status"] == "interrupted"
        # A client holding the last delta written goes on from the log, and can see it
        # missed nothing: the next event names its id.
        rest = read_events(client, sid, last_event_id=cut)
        assert [e.id for e in rest] == served[served.index(cut) + 1 :]
        # Every event names the one before it: the live ones as the dead process numbered
        # them, the log's across the hole — a client holding a lost number would see that
        # the event after the hole does not follow it.
        _check_prev_chain(seen, 0)
        _check_prev_chain(everything, 0)
        assert rest[0].data["prev"] == resumed.data["prev"] == cut
