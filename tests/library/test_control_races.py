"""Session control when two things happen at once, on SQLite and PostgreSQL: a rewind and a
message, a rollback or an interrupt and the takeover's sweep, a queued message's caller and the
process that runs (or cancels) its message.

Each race is made to happen, not hoped for: the test holds one side at the seam it races on
(a store method of one agent, gated until the test lets it go) while the other side acts. The
other side is a second agent on the same journal — another process as far as the journal can
tell: it shares no memory with the first — or a real ``drover serve`` process.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
from server.support import Served, clean_env, read_events, servers
from store.conftest import pg_cluster, pg_database, pg_url

from drover import Agent, ToolContext, tool
from drover.agent.session import Session
from drover.config.settings import Config
from drover.errors import QueueChangedError, SessionHeldError
from drover.journal.protocol import Store
from drover.journal.records import QueuedMessage
from drover.runtime.runner import load_history
from drover.runtime.turns import RunningTurn
from drover.store import open_store
from drover.testing.scripted import Reply, ScriptedProvider, call, request_problems
from drover.testing.server import FakeLLMServer
from drover.tools.base import Tool
from drover.tools.builtin.files import write_file

#: The store tests' fixtures (a throwaway PostgreSQL, a schema per test), found by pytest here.
FIXTURES = (pg_cluster, pg_database, pg_url)
#: Seconds: a failure bound for a wait, never a synchronisation.
BOUND = 60.0
NO_PROBLEMS = {"anthropic": [], "openai": [], "openai-responses": []}


@pytest.fixture(params=["sqlite", "postgres"])
def journal(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The journal both sides open: a SQLite file, or a PostgreSQL schema of the test's own."""
    if request.param == "sqlite":
        return str(tmp_path / "journal.db")
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture(autouse=True)
def workdir(tmp_path: Path) -> Path:
    """The working directory every agent (and server) of a test shares."""
    (tmp_path / "work").mkdir()
    return tmp_path / "work"


@pytest.fixture
async def opened(journal: str) -> AsyncIterator[Callable[[], Store]]:
    """``opened()``: a new open store on the journal (closed at teardown), for an agent to be
    given (so that the test can gate it)."""
    stores: list[Store] = []

    def open_one() -> Store:
        store = open_store(journal)
        stores.append(store)
        return store

    yield open_one
    for store in stores:
        await store.close()


class Gate:
    """Holds the first call of ``store.<method>`` — before it reaches the journal, or with
    ``made`` once the journal made it — until the test sets :attr:`go`; :attr:`reached` says
    the call is waiting."""

    def __init__(self, store: Store, method: str, *, made: bool = False) -> None:
        self.reached = asyncio.Event()
        self.go = asyncio.Event()
        original = getattr(store, method)

        async def gated(*args: Any, **kwargs: Any) -> Any:
            if self.reached.is_set():
                return await original(*args, **kwargs)
            result = await original(*args, **kwargs) if made else None
            self.reached.set()
            await self.go.wait()
            return result if made else await original(*args, **kwargs)

        setattr(store, method, gated)


class Calls:
    """Counts the calls of ``store.<method>`` that returned or raised: :meth:`reached` waits
    until ``n`` did."""

    def __init__(self, store: Store, method: str) -> None:
        self.done = 0
        self._changed = asyncio.Condition()
        original = getattr(store, method)

        async def counted(*args: Any, **kwargs: Any) -> Any:
            try:
                return await original(*args, **kwargs)
            finally:
                async with self._changed:
                    self.done += 1
                    self._changed.notify_all()

        setattr(store, method, counted)

    async def reached(self, n: int) -> None:
        async with asyncio.timeout(BOUND), self._changed:
            await self._changed.wait_for(lambda: self.done >= n)


class ToolGate:
    """A ``slow`` tool that waits, once entered, until the test lets it finish."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.go = asyncio.Event()

        @tool()
        async def slow(ctx: ToolContext, label: str) -> str:
            """Wait until the test lets the call finish."""
            self.entered.set()
            await self.go.wait()
            return f"slow {label} done"

        self.tool: Tool = slow


async def agent_on(store: Store, provider: ScriptedProvider, workdir: Path, *tools: Tool) -> Agent:
    await store.open()
    agent = Agent(
        provider,
        tools=list(tools) or [write_file],
        store=store,
        workdir=workdir,
        config=Config(),
        permission_mode="allow",
    )
    return await agent.open()


def user_texts(provider: ScriptedProvider) -> list[list[str]]:
    """The user's words of each request the provider got."""
    return [
        [m.text for m in request.messages if m.role == "user" and m.text]
        for request in provider.requests
    ]


async def until(check: Callable[[], Any], what: str) -> None:
    """Wait (bounded) until the awaitable ``check()`` gives something true: state another
    process changes, which nothing here is told of."""
    async with asyncio.timeout(BOUND):
        while not await check():  # noqa: ASYNC110
            await asyncio.sleep(0.01)


async def ran(agent: Agent, session_id: str, message_id: str) -> None:
    """Until the turn of a queued message ended (the agent runs it, or has run it)."""
    turn = await asyncio.wait_for(agent.runner.queue.turn_of(session_id, message_id), BOUND)
    if isinstance(turn, RunningTurn):
        await turn.finished()
        return

    async def ended() -> bool:
        found = await agent.store.get_turn(turn)
        return found is not None and found.status != "running"

    await until(ended, "the queued message's turn ended")


# -- 1. a rewind holds its session from the plan to the marks ---------------------------------


def two_file_turns() -> list[Reply]:
    return [
        Reply(calls=[call("write_file", path="notes.txt", content="first\n")]),
        Reply(text="one done"),
        Reply(calls=[call("write_file", path="notes.txt", content="second\n")]),
        Reply(text="two done"),
    ]


async def test_a_message_during_a_rewind_is_refused_or_queued_then_runs_after_it(
    opened: Callable[[], Store], tmp_path: Path
) -> None:
    """A message sent while a rewind works (its files put back, its marks not written yet):
    refused as busy — or, with ``enqueue``, queued and run once the rewind is done. Never a
    turn between the plan and the marks, which the rewind would either refuse after having put
    the files back, or mark rewound without having planned it."""
    work = tmp_path / "work"
    rewinder = ScriptedProvider([*two_file_turns(), Reply(text="after the rewind")])
    other = ScriptedProvider([Reply(text="later")])
    store_a = opened()
    gate = Gate(store_a, "rewind_turns")
    a = await agent_on(store_a, rewinder, work)
    b = await agent_on(opened(), other, work)
    try:
        session = await a.session()
        await session.run("one")
        two = await session.run("two")
        assert (work / "notes.txt").read_text() == "second\n"
        rewinding = asyncio.ensure_future(session.rewind(two.turn_id))
        await asyncio.wait_for(gate.reached.wait(), BOUND)
        assert (work / "notes.txt").read_text() == "first\n"  # put back; not marked yet

        seen = await b.session(session.id)  # another process's handle of the session
        with pytest.raises(SessionHeldError):
            await seen.run("too soon")
        queued = await seen.submit("queued meanwhile", if_busy="enqueue")
        assert isinstance(queued, QueuedMessage)
        assert other.requests == []

        gate.go.set()
        result = await asyncio.wait_for(rewinding, BOUND)
        assert result.rewound == (two.turn_id,) and result.restored == ("notes.txt",)
        # The rewinding agent runs what was queued meanwhile, as after a turn.
        await ran(a, session.id, queued.id)
        turns = await a.store.turns(session.id)
        assert [(t.status, t.rewound) for t in turns] == [
            ("completed", False),
            ("completed", True),
            ("completed", False),
        ]
        assert user_texts(rewinder)[-1] == ["one", "queued meanwhile"]
        assert other.requests == []
        later = await seen.run("later")
        assert later.completed and user_texts(other)[-1] == ["one", "queued meanwhile", "later"]
    finally:
        await b.aclose()
        await a.aclose()


async def test_a_rewind_cancelled_as_it_takes_its_hold_leaves_the_session_free(
    opened: Callable[[], Store], workdir: Path
) -> None:
    """The hold was written, the rewind cancelled before it heard so: the hold is taken back
    (it would have refused every turn until its lease ran out)."""
    provider = ScriptedProvider([Reply(text="one done"), Reply(text="two done")])
    store = opened()
    holding = Gate(store, "hold_session", made=True)
    agent = await agent_on(store, provider, workdir)
    try:
        session = await agent.session()
        one = await session.run("one")
        rewinding = asyncio.ensure_future(session.rewind(one.turn_id))
        await asyncio.wait_for(holding.reached.wait(), BOUND)
        rewinding.cancel()
        with pytest.raises(asyncio.CancelledError):
            await rewinding
        two = await session.run("two")
        assert two.completed and not any(t.rewound for t in await store.turns(session.id))
    finally:
        holding.go.set()
        await agent.aclose()


# -- 5. rollback and interrupt against the takeover's sweep -----------------------------------


@dataclass
class Busy:
    """A session whose turn waits in the ``slow`` tool with a message queued behind it; a
    second agent on the same journal plays the takeover's sweep (another process starting the
    session's queue, as ``drover serve`` does on its timer)."""

    mine: Agent
    sweep: Agent
    store: Store
    session: Session
    queued: QueuedMessage
    replies: ScriptedProvider
    swept: ScriptedProvider
    gates: list[Gate]

    def gate(self, method: str) -> Gate:
        """Gate the next call of the session's agent's ``store.<method>``."""
        self.gates.append(Gate(self.store, method))
        return self.gates[-1]

    async def sweep_starts(self) -> RunningTurn | None:
        return await (await self.sweep.session(self.session.id)).start_queued()


@contextlib.asynccontextmanager
async def busy_with_a_queue(
    opened: Callable[[], Store], workdir: Path, answer: str
) -> AsyncIterator[Busy]:
    """:class:`Busy`; the session's model answers the next message ``answer``."""
    tool = ToolGate()
    replies = ScriptedProvider(
        [
            Reply(text="Let me work.", calls=[call("slow", label="w")]),
            Reply(text=answer),
            Reply(text="queued one ran"),
        ]
    )
    swept = ScriptedProvider([Reply(text="the sweep ran it")])
    store = opened()
    mine = await agent_on(store, replies, workdir, tool.tool)
    sweep = await agent_on(opened(), swept, workdir, tool.tool)
    gates: list[Gate] = []
    try:
        session = await mine.session()
        assert isinstance(await session.submit("do the work"), RunningTurn)
        await asyncio.wait_for(tool.entered.wait(), BOUND)
        queued = await session.submit("queued one", if_busy="enqueue")
        assert isinstance(queued, QueuedMessage)
        yield Busy(mine, sweep, store, session, queued, replies, swept, gates)
    finally:
        tool.go.set()
        for gate in gates:
            gate.go.set()
        await sweep.aclose()
        await mine.aclose()


async def test_the_sweep_cannot_start_the_queue_while_a_rollback_discards(
    opened: Callable[[], Store], workdir: Path
) -> None:
    """While a rollback's discard is being written, the takeover's sweep finds the session
    held: the rolled-back work never reaches a model, the rollback's message runs next and
    the queued one after it."""
    async with busy_with_a_queue(opened, workdir, "started over") as busy:
        session = busy.session
        discarding = busy.gate("discard_pending")
        rollback = asyncio.ensure_future(session.submit("start over", if_busy="rollback"))
        await asyncio.wait_for(discarding.reached.wait(), BOUND)
        # The turn is over, its work not yet marked discarded: the sweep comes now.
        assert await busy.sweep_starts() is None

        discarding.go.set()
        new = await asyncio.wait_for(rollback, BOUND)
        assert isinstance(new, RunningTurn)
        await new.finished()
        await ran(busy.mine, session.id, busy.queued.id)
        assert busy.swept.requests == []
        turns = await busy.store.turns(session.id)
        assert [(t.status, t.discarded) for t in turns] == [
            ("interrupted", True),
            ("completed", False),
            ("completed", False),
        ]
        assert user_texts(busy.replies)[1:] == [["start over"], ["start over", "queued one"]]
        # A fresh process sends none of the rolled-back work either.
        history = await load_history(busy.store, session.id)
        messages = [*history.committed, *history.pending]
        said = [m.text for m in messages if m.role == "user" and m.text]
        assert said == ["start over", "queued one"]
        assert request_problems(messages) == NO_PROBLEMS


async def test_the_sweep_cannot_start_the_queue_before_an_interrupting_message(
    opened: Callable[[], Store], workdir: Path
) -> None:
    """An ``interrupt`` message goes next, before the queue: the sweep coming between the
    stopped turn's end and the message's turn start finds the session held (it used to start
    the queued message first, and the interrupting message was refused as busy). Once the
    message's turn started, the session is that turn's: the queue follows it as after any
    turn, however late the hold's release comes."""
    async with busy_with_a_queue(opened, workdir, "changed plan") as busy:
        session = busy.session
        beginning = busy.gate("begin_turn")  # (the next start: the message's)
        releasing = busy.gate("release_hold")
        change = asyncio.ensure_future(session.submit("change of plan", if_busy="interrupt"))
        await asyncio.wait_for(beginning.reached.wait(), BOUND)
        assert (await busy.store.turns(session.id))[0].status == "interrupted"
        assert await busy.sweep_starts() is None

        beginning.go.set()
        await asyncio.wait_for(releasing.reached.wait(), BOUND)
        await ran(busy.mine, session.id, busy.queued.id)  # (the release still on its way)
        releasing.go.set()
        new = await asyncio.wait_for(change, BOUND)
        assert isinstance(new, RunningTurn) and new.end is not None
        assert busy.swept.requests == []
        turns = await busy.store.turns(session.id)
        assert [t.status for t in turns] == ["interrupted", "completed", "completed"]
        said = [t.user_message.text for t in turns if t.user_message is not None]
        assert said == ["do the work", "change of plan", "queued one"]


async def test_a_rollback_cancelled_before_its_message_starts_leaves_the_queue_running(
    opened: Callable[[], Store], workdir: Path
) -> None:
    """The rollback stopped the turn and was cancelled before it discarded anything: nothing
    was rolled back, and the queue runs after the stopped turn as it would have (the turn had
    been told to leave it to the rollback's message)."""
    async with busy_with_a_queue(opened, workdir, "queued one ran") as busy:
        session = busy.session
        discarding = busy.gate("discard_pending")
        rollback = asyncio.ensure_future(session.submit("start over", if_busy="rollback"))
        await asyncio.wait_for(discarding.reached.wait(), BOUND)
        rollback.cancel()
        with pytest.raises(asyncio.CancelledError):
            await rollback
        await ran(busy.mine, session.id, busy.queued.id)
        turns = await busy.store.turns(session.id)
        assert [(t.status, t.discarded) for t in turns] == [
            ("interrupted", False),
            ("completed", False),
        ]
        assert user_texts(busy.replies)[-1] == ["do the work", "queued one"]


# -- across real processes: a drover serve and this one ---------------------------------------

#: An answer of many deltas, and the frame it stalls after (a turn held running).
LONG = "Working through the request step by step, and this goes on for a good while. " * 2
STALL = 7


@pytest.fixture
def other_server(
    fake_llm: FakeLLMServer, journal: str, tmp_path: Path
) -> Iterator[Callable[[], Served]]:
    """``other_server()``: a real ``drover serve`` on the test's journal, its model streams
    allowed to stall (how a turn is held running), its takeover timer out of the way (this
    process is the other one); stopped at teardown."""
    with servers(fake_llm, tmp_path) as start:
        flags = ("--db", journal, "--takeover-interval", "3600")
        yield lambda: start(*flags, env=clean_env(DROVER_STALL_TIMEOUT="600"))


async def _post(c: httpx2.AsyncClient, sid: str, content: str, **more: Any) -> httpx2.Response:
    return await c.post(f"/v1/sessions/{sid}/messages", json={"content": content, **more})


async def test_run_with_enqueue_returns_when_another_process_runs_or_cancels_the_message(
    fake_llm: FakeLLMServer,
    other_server: Callable[[], Served],
    opened: Callable[[], Store],
    tmp_path: Path,
) -> None:
    """``session.run(…, if_busy="enqueue")`` while another process runs the session's turn:
    that process runs the queued message after its turn (or a client of it cancels the
    message), and the call here returns the message's result (or raises) — it used to wait
    for ever, for its own process's queue."""
    fake_llm.script({"text": LONG, "stall_after": STALL}, {"text": "the queued answer"})
    fake_llm.allow_unexpected = True  # the stalled stream is cut by the interrupt
    server = other_server()
    with server.client() as c:
        sid = c.post("/v1/sessions", json={}).json()["id"]
        assert c.post(f"/v1/sessions/{sid}/messages", json={"content": "first"}).is_success
        read_events(c, sid, until=lambda ev, _: ev.event == "text_delta")
    store = opened()
    # Each run here tries to start its message twice (at once, then as the queue's head),
    # refused both times while the other process's turn runs: once both are over, only the
    # other process can run the message.
    starts = Calls(store, "begin_turn")
    here = await agent_on(store, ScriptedProvider([]), tmp_path / "work")
    try:
        session = await here.session(sid)
        dropped = asyncio.ensure_future(session.run("dropped", if_busy="enqueue"))
        await starts.reached(2)
        (message,) = await session.queued()
        async with httpx2.AsyncClient(base_url=server.url, timeout=BOUND) as ac:
            gone = await ac.delete(f"/v1/sessions/{sid}/queue/{message.id}")
            assert gone.status_code == 200, gone.text
            with pytest.raises(QueueChangedError):
                await asyncio.wait_for(dropped, BOUND)

            kept = asyncio.ensure_future(session.run("second", if_busy="enqueue"))
            await starts.reached(4)
            stop = await ac.post(f"/v1/sessions/{sid}/interrupt", json={})
            assert stop.status_code == 202, stop.text
            result = await asyncio.wait_for(kept, BOUND)
        assert result.completed and result.text == "the queued answer"
        stored = await here.store.queued_messages(sid, every=True)
        assert [(m.content, m.status) for m in stored] == [
            ("dropped", "cancelled"),
            ("second", "started"),
        ]
        assert result.turn_id == stored[1].turn_id
        turns = await here.store.turns(sid)
        assert [t.status for t in turns] == ["interrupted", "completed"]
        assert result.pending == ()
    finally:
        await here.aclose()


async def test_a_message_posted_to_another_process_during_a_rewind_waits_for_it(
    fake_llm: FakeLLMServer,
    other_server: Callable[[], Served],
    opened: Callable[[], Store],
    tmp_path: Path,
) -> None:
    """This process rewinds (held between its files and its marks); a client posts to a
    ``drover serve`` on the same journal: refused as busy (no turn named: none runs), or
    queued and run once the rewind is done — after it, unrewound."""
    fake_llm.script(
        {"tool_calls": [{"name": "write_file", "input": {"path": "n.txt", "content": "1"}}]},
        {"text": "one done"},
        {"tool_calls": [{"name": "write_file", "input": {"path": "n.txt", "content": "2"}}]},
        {"text": "two done"},
    )
    server = other_server()
    work = tmp_path / "work"
    with server.client() as c:
        sid = c.post("/v1/sessions", json={}).json()["id"]
        for word in ("one", "two"):
            assert c.post(f"/v1/sessions/{sid}/messages", json={"content": word}).is_success
            read_events(c, sid, until=lambda ev, _, w=word: _ended(ev, f"{w} done"))
        two = c.get(f"/v1/sessions/{sid}").json()["turns"][1]["id"]
    store = opened()
    gate = Gate(store, "rewind_turns")
    here = await agent_on(store, ScriptedProvider([Reply(text="after the rewind")]), work)
    try:
        rewinding = asyncio.ensure_future(here.rewind(sid, two))
        await asyncio.wait_for(gate.reached.wait(), BOUND)
        async with httpx2.AsyncClient(base_url=server.url, timeout=BOUND) as ac:
            busy = await _post(ac, sid, "too soon")
            assert busy.status_code == 409, busy.text
            assert busy.json()["error"]["code"] == "session_busy"
            assert "turn_id" not in busy.json()
            queued = await _post(ac, sid, "queued meanwhile", if_busy="enqueue")
            assert queued.status_code == 202 and queued.json()["queued"] is True, queued.text
            gate.go.set()
            result = await asyncio.wait_for(rewinding, BOUND)
            assert result.rewound == (two,) and (work / "n.txt").read_text() == "1"

            async def ran() -> bool:
                turns = await here.store.turns(sid)
                return len(turns) == 3 and turns[2].status == "completed"

            await until(ran, "the queued message ran")
        turns = await here.store.turns(sid)
        assert [t.rewound for t in turns] == [False, True, False]
        said = [t.user_message.text for t in turns if t.user_message is not None]
        assert said == ["one", "two", "queued meanwhile"]
    finally:
        gate.go.set()
        with contextlib.suppress(Exception):
            await rewinding
        await here.aclose()


def _ended(ev: Any, text: str) -> bool:
    return ev.event == "done" and ev.data.get("text") == text
