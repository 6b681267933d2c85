"""A snapshot is current to exactly its ``last_event_id``: the reload seam, closed to zero.

``GET /v1/sessions/{id}`` then ``…/events?after=<last_event_id>`` is how a client loads a
session whose answer is still streaming (the web page does it on every load). Each text delta
is numbered and shown live before the journal writes it; the snapshot reads what was written.
Here an answer is journaled as the runner journals it, its deltas published to a real
server's hub, on SQLite and on PostgreSQL, with a fake clock, so hypothesis decides every
interleaving: the words (with runs the redactor keeps back, and a secret it redacts), how they
are cut into deltas, and when the time and size gates flush. After every delta a reader loads
the session the documented way, and through a ``reset`` (a position that cannot be
continued), and replays the response from its start as the doors (AI SDK, Responses) do; and
when the answer is over, each loads the rest from where it stood. Snapshot text and the text
of the events after it are the answer, every delta once: none lost at the seam, none twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from store.conftest import pg_cluster, pg_database, pg_url

from drover import Agent
from drover.config.settings import Config
from drover.core.events import AssistantMessage, Done, StepStarted, TextDelta, TurnStarted
from drover.core.messages import TextBlock, Usage, assistant_message, user_message
from drover.journal.journal import Journal
from drover.journal.protocol import Store
from drover.journal.records import SessionRecord, TurnRecord
from drover.journal.redact import Redactor
from drover.runtime.hub import Hub, TransientFrame
from drover.server.doors import replay_response, start_seq
from drover.server.follow import Batch, Follower, Reset, frame_event
from drover.server.service import Service
from drover.store import open_store
from drover.testing.scripted import ScriptedProvider

#: The store tests' fixtures (a throwaway PostgreSQL, a schema per test), found by pytest here.
FIXTURES = (pg_cluster, pg_database, pg_url)
BOUND = 60.0  # seconds: a failure bound, never a synchronisation
SECRET = "sk-ant-api03-" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2" * 2
#: A number no log of these tests reaches: a client holding it is sent a ``reset``.
AHEAD = 10**9
#: The flush timer's interval (the fake clock moves by it between two deltas when drawn).
INTERVAL = 0.25

_words = st.sampled_from(
    [
        "seven",
        "eight",
        "nine",
        "sentence",
        "abcdefghijklmnop",  # a key-like run the redactor keeps back while it grows
        SECRET,
        "key=" + SECRET[:20],
        "été",
        "日本語",
        "-",
    ]
)
_answers = st.lists(
    st.tuples(_words, st.sampled_from([" ", "", ". ", "\n"])), min_size=1, max_size=8
).map(lambda words: "".join(w + sep for w, sep in words))


@dataclass
class Moment:
    """What readers held at one moment of the stream."""

    fed: str
    #: The snapshot's partial text and ``last_event_id``.
    text: str
    last: int
    #: A ``reset`` snapshot's text and its number.
    reset_text: str
    reset_at: int


@dataclass
class Served:
    """A service the test reads through, on the loop its examples run on."""

    runner: asyncio.Runner
    service: Service
    workdir: Path
    #: Where the journal is (a SQLite file, a PostgreSQL URL).
    store_at: str


@pytest.fixture(params=["sqlite", "postgres"])
def served(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Served]:
    """A server's service on a SQLite or a PostgreSQL journal, open on an event loop of its own
    for the whole test: hypothesis runs each example on it (each on a session of its own)."""
    store_at = str(tmp_path / "journal.db")
    if request.param == "postgres":
        store_at = str(request.getfixturevalue("pg_url"))
    agent = Agent(ScriptedProvider([]), tools=[], store=store_at, workdir=tmp_path, config=Config())
    with asyncio.Runner() as runner:
        runner.run(agent.open())
        try:
            yield Served(runner, Service(agent=agent, hub=Hub()), tmp_path, store_at)
        finally:
            runner.run(agent.aclose())


async def _never(_: float) -> None:
    """The flush timer's sleep: it never fires (the fake clock's time gate flushes)."""
    await asyncio.Event().wait()


class Answer:
    """One answer of a running turn, journaled as the runner journals it (its events numbered
    and published to the service's hub as they come), on a clock the test moves."""

    def __init__(self, service: Service, record: SessionRecord, turn: TurnRecord, size: int):
        self.now = 0.0
        self.journal = Journal(
            service.store,
            record.id,
            clock=lambda: self.now,
            sleep=_never,
            flush_interval=INTERVAL,
            flush_bytes=size,
            turn_id=turn.id,
            owner=service.runner.owner,
            publish=partial(service.hub.publish, record.id),
        )

    async def start(self, turn: TurnRecord) -> None:
        event = TurnStarted(turn_id=turn.id, session_id=turn.session_id, user_message=None)
        await self.journal.send(event)
        await self.journal.send(StepStarted(step=1))

    async def finish(self, text: str) -> None:
        message = assistant_message([TextBlock(text=text)])
        await self.journal.send(AssistantMessage(message=message))
        await self.journal.send(Done(text=text, usage=Usage()))
        await self.journal.aclose()


def _deltas(batch: Batch) -> tuple[str, Reset | None]:
    """The text of a batch's deltas up to the step's message, and the ``reset`` it began with;
    every number served once, in order."""
    reset = batch[0] if batch and isinstance(batch[0], Reset) else None
    numbered = [item for item in batch if not isinstance(item, Reset | TransientFrame)]
    ids = [frame.seq for frame in numbered]
    assert ids == sorted(set(ids)), f"numbers out of order or twice: {ids}"
    texts = []
    for frame in numbered:
        event = frame_event(frame)
        if event["type"] == "assistant_message":
            break
        if event["type"] == "text_delta":
            texts.append(event["text"])
    return "".join(texts), reset


def _partial_text(snapshot: dict[str, Any]) -> str:
    (turn,) = snapshot["turns"]
    return "".join(
        block["text"]
        for m in turn["messages"]
        if m["partial"]
        for block in m["message"]["content"]
        if block["type"] == "text"
    )


async def _reader(service: Service, record: SessionRecord, after: int) -> tuple[str, Reset | None]:
    """What ``GET …/events?after=`` serves now (the backlog a stream starts with)."""
    return _deltas(await Follower(service, record).catch_up(after))


async def _moment(service: Service, record: SessionRecord, head: str, fed: str) -> Moment:
    redact = Redactor().redact
    snapshot = await service.snapshot(record)
    text, last = _partial_text(snapshot), int(snapshot["last_event_id"])
    rest, reset = await _reader(service, record, last)
    assert reset is None
    # Live deltas are the provider's text, the log's are redacted: equal once redacted.
    assert redact(text + rest) == redact(fed), "the snapshot and the events after it"
    rest, reset = await _reader(service, record, AHEAD)
    assert reset is not None
    reset_text = _partial_text(reset.snapshot)
    assert redact(reset_text + rest) == redact(fed), "a reset and the events after it"
    start = await start_seq(service.store, record.id, head)
    assert start is not None
    events, ended = await replay_response(service, record, head, start)
    assert ended is None
    replayed = "".join(e["text"] for e in events if e["type"] == "text_delta")
    assert redact(replayed) == redact(fed), "a door's replay of the response"
    return Moment(fed, text, last, reset_text, reset.seq)


async def _stream_and_reload(
    service: Service, text: str, sizes: list[int], ticks: list[bool], flush: int
) -> None:
    store = service.store
    record = await store.create_session(workdir="/w", model="m")
    turn = await store.begin_turn(record.id, user_message("go"), service.runner.owner, 3600)
    live = Follower(service, record)  # a client following from the start (as the runner's
    await live.open()  # turn keeps the feed, this keeps its ring)
    answer = Answer(service, record, turn, flush)
    await answer.start(turn)
    moments: list[Moment] = []
    pos = i = 0
    while pos < len(text):
        piece = text[pos : pos + sizes[i % len(sizes)]]
        pos += len(piece)
        await answer.journal.send(TextDelta(text=piece))
        if ticks[i % len(ticks)]:
            answer.now += INTERVAL  # the next delta finds the time gate open
        moments.append(await _moment(service, record, turn.id, text[:pos]))
        i += 1
    await answer.finish(text)
    final = await service.snapshot(record)
    (message,) = [m for m in final["turns"][0]["messages"] if not m["partial"]]
    answered = message["message"]["content"][0]["text"]
    assert answered == Redactor().redact(text)
    for moment in moments:
        rest, _ = await _reader(service, record, moment.last)
        assert moment.text + rest == answered, f"after {moment.last} of {moment.fed!r}"
        rest, _ = await _reader(service, record, moment.reset_at)
        assert moment.reset_text + rest == answered, f"reset at {moment.reset_at}"
    live.close()


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    text=_answers,
    sizes=st.lists(st.integers(1, 12), min_size=1, max_size=8),
    ticks=st.lists(st.booleans(), min_size=1, max_size=8),
    flush=st.integers(4, 64),
)
# The issue's: words cut inside, each flush keeping the word in progress back.
@example(
    text="one two three four five six seven eight nine ten ", sizes=[5], ticks=[False], flush=10
)
# A secret redacted in a row that holds several deltas, then more text after it.
@example(text=f"key is {SECRET} and more words end ", sizes=[7, 15], ticks=[True], flush=12)
def test_a_snapshot_and_the_events_after_it_hold_the_answer_once(
    served: Served, text: str, sizes: list[int], ticks: list[bool], flush: int
) -> None:
    served.runner.run(_stream_and_reload(served.service, text, sizes, ticks, flush))


#: What a snapshot reads of the store (before and after it read in one transaction).
_READS = (
    "get_session",
    "turns",
    "turn_messages",
    "tool_calls",
    "queued_messages",
    "running_usage",
    "last_event_seq",
    "transcript",
)


def _racing(store: Store, after_read: Callable[[], Awaitable[None]]) -> Store:
    """``store``, letting ``after_read`` write (a flush of another task) after each of the
    reads a snapshot makes: every interleaving of a snapshot with the flushes of a stream."""
    racing = False

    def racer(name: str) -> Callable[..., Awaitable[Any]]:
        read = getattr(store, name)

        async def raced(*args: Any, **kwargs: Any) -> Any:
            nonlocal racing
            found = await read(*args, **kwargs)
            if not racing:
                racing = True
                try:
                    await after_read()
                finally:
                    racing = False
            return found

        return raced

    for name in _READS:
        setattr(store, name, racer(name))
    return store


async def _read_while_flushed(store_at: str, workdir: Path) -> None:
    store = open_store(store_at)
    async with (
        store,
        Agent(
            ScriptedProvider([]), tools=[], store=store, workdir=workdir, config=Config()
        ) as agent,
    ):
        service = Service(agent=agent, hub=Hub())
        record = await store.create_session(workdir="/w", model="m")
        turn = await store.begin_turn(record.id, user_message("go"), agent.runner.owner, 3600)
        live = Follower(service, record)
        await live.open()
        answer = Answer(service, record, turn, 1)  # every delta flushed as it comes
        await answer.start(turn)
        said: list[str] = []
        racing = True

        async def say() -> None:
            if racing:
                said.append(f"w{len(said)} ")
                await answer.journal.send(TextDelta(text=said[-1]))

        await say()
        _racing(store, say)
        snapshots = [await service.snapshot(record) for _ in range(3)]
        racing = False
        text = "".join(said)
        await answer.finish(text)
        for snapshot in snapshots:
            last = int(snapshot["last_event_id"])
            rest, _ = await _reader(service, record, last)
            assert _partial_text(snapshot) + rest == text, f"after {last}"
        live.close()


def test_a_snapshot_read_while_the_answer_is_flushed_is_current_to_its_number(
    served: Served,
) -> None:
    """A flush commits between any two reads of a snapshot (a long session's takes many):
    its ``last_event_id`` is still the number its text runs to, not a later one."""
    served.runner.run(_read_while_flushed(served.store_at, served.workdir))
