"""Numbers and retries that cannot double: each race driven on a real store.

* A process past its lease that reaches the end of its block of numbers must not move the
  reservation of the process that took the session over (nor publish numbers it does not
  hold): reserving numbers is a write of the turn, refused to a process that lost it.
* Two events sent at once (parallel tool calls) across a block boundary must be published in
  the order of their numbers: the live feed drops a number lower than one it already has.
* A PostgreSQL write whose COMMIT went through but whose acknowledgement was lost (the
  backend ended with ``pg_terminate_backend`` after committing, by a proxy the test controls)
  must not be made twice — no message appended twice, no duplicate-key failure, no turn ended
  twice.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from store.conftest import pg_cluster, pg_database, pg_url
from support import pg

from drover.core.events import (
    AssistantMessage,
    Done,
    StepStarted,
    TextDelta,
    ToolStateChanged,
    TurnStarted,
    WorkerEvent,
)
from drover.core.messages import TextBlock, Usage, assistant_message, user_message
from drover.errors import LeaseLostError
from drover.journal.journal import Journal
from drover.journal.numbering import RESERVE_BLOCK
from drover.journal.protocol import Store
from drover.runtime.hub import Hub
from drover.store.postgres.store import PostgresStore
from drover.store.sqlite.store import SqliteStore

from .commit_ack_proxy import CommitAckProxy

A, B = "host-a:1:1", "host-b:2:2"
#: The store tests' fixtures (a throwaway PostgreSQL, a schema per test), found by pytest here.
FIXTURES = (pg_cluster, pg_database, pg_url)


@pytest.fixture(params=["sqlite", "postgres"])
def new_store(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[..., Store]:
    """New stores on one database of the test's own (as other processes would open it)."""
    if request.param == "sqlite":
        return lambda cls=SqliteStore: cls(tmp_path / "journal.db")
    url = str(request.getfixturevalue("pg_url"))
    return lambda cls=PostgresStore: cls(url)


class Published:
    """What a journal published, in the order it did."""

    def __init__(self) -> None:
        self.seqs: list[int] = []

    def __call__(self, seq: int, turn_id: str | None, payload: Any, *prev: int) -> None:
        self.seqs.append(seq)


def _quiet(store: Store, session_id: str, turn_id: str, owner: str, out: Published) -> Journal:
    """A journal whose text stays buffered (no gate fires): its next write is its next
    reservation of numbers."""
    return Journal(
        store,
        session_id,
        turn_id=turn_id,
        owner=owner,
        flush_interval=10**6,
        flush_bytes=10**9,
        publish=out,
    )


async def test_a_process_past_its_lease_cannot_move_the_new_owners_reservation(
    new_store: Callable[..., Store],
) -> None:
    async with new_store() as store_a, new_store() as store_b:
        session = await store_a.create_session(workdir="/w", model="m")
        first = await store_a.begin_turn(session.id, user_message("go"), A, 30)
        published_a = Published()
        a = _quiet(store_a, session.id, first.id, A, published_a)
        await a.send(TurnStarted(turn_id=first.id, session_id=session.id, user_message=None))
        await a.send(StepStarted(step=1))
        for _ in range(RESERVE_BLOCK - 2):  # numbers up to the end of A's block
            await a.send(TextDelta(text="x"))
        assert published_a.seqs[-1] == RESERVE_BLOCK

        # A stalls past its lease (a pause, a partition); B takes the session over.
        assert await store_b.recover_orphans(is_alive=lambda owner: owner != A) == [first.id]
        second = await store_b.begin_turn(session.id, user_message("go on"), B, 30)
        published_b = Published()
        b = Journal(store_b, session.id, turn_id=second.id, owner=B, publish=published_b)
        await b.send(TurnStarted(turn_id=second.id, session_id=session.id, user_message=None))
        reserved_by_b = await store_b.next_event_seq(session.id) - 1
        assert reserved_by_b >= published_b.seqs[-1] + RESERVE_BLOCK - 1

        # A wakes up and needs its next block of numbers: refused, A's journal fails as with
        # any write of a turn it lost, and publishes nothing more.
        await a.send(TextDelta(text="late"))
        assert a.failure is not None
        assert isinstance(a.failure.__cause__, LeaseLostError)
        assert published_a.seqs[-1] == RESERVE_BLOCK
        # B's reservation is intact: were B to die now, recovery would number after it.
        assert await store_a.next_event_seq(session.id) == reserved_by_b + 1
        await a.aclose()

        await b.send(StepStarted(step=1))
        await b.send(TextDelta(text="fine"))
        message = assistant_message([TextBlock(text="fine")])
        await b.send(AssistantMessage(message=message))
        await b.send(Done(text="fine", usage=Usage()))
        await b.aclose()
        assert b.failure is None
        rows = await store_b.events_after(session.id)
        numbers = [n for r in rows for n in range(r.seq, r.end_seq + 1)]
        assert len(numbers) == len(set(numbers)), "a number used twice"
        assert set(published_b.seqs) <= set(numbers)
        # B's end gave back the numbers it did not use.
        assert await store_b.next_event_seq(session.id) == published_b.seqs[-1] + 1


class GatedReservations:
    """Holds the second reservation of numbers (the one at the first block boundary) until a
    later one has been made — as a pool of connections may finish two writes in either
    order — or the test opens the gate."""

    def __init__(self) -> None:
        self.calls: list[int] = []
        self.entered = asyncio.Event()
        self.gate = asyncio.Event()

    def wrap(self, store: Store) -> Store:
        real = store.reserve_seqs

        async def reserve_seqs(session_id: str, upto: int, **owner: Any) -> None:
            self.calls.append(upto)
            held = len(self.calls) == 2
            if held:
                self.entered.set()
                await self.gate.wait()
            await real(session_id, upto, **owner)
            if len(self.calls) > 2:
                self.gate.set()

        store.reserve_seqs = reserve_seqs  # type: ignore[method-assign]
        return store


async def _near_a_boundary(
    store: Store, publish: Callable[..., None], session_id: str, used: int
) -> Journal:
    """The journal of a new turn of the session once it handed out the numbers 1 to
    ``used`` (its start, a step, text deltas)."""
    turn = await store.begin_turn(session_id, user_message("go"), A, 30)
    journal = Journal(store, session_id, turn_id=turn.id, owner=A, publish=publish)
    await journal.send(TurnStarted(turn_id=turn.id, session_id=session_id, user_message=None))
    await journal.send(StepStarted(step=1))
    for _ in range(used - 2):
        await journal.send(TextDelta(text="y"))
    return journal


async def test_parallel_sends_at_a_block_boundary_are_published_in_order(
    new_store: Callable[..., Store],
) -> None:
    gated = GatedReservations()
    async with new_store() as store:
        gated.wrap(store)
        session = await store.create_session(workdir="/w", model="m")
        hub = Hub()
        order: list[int] = []

        def publish(seq: int, turn_id: str | None, payload: Any, *prev: int) -> None:
            order.append(seq)
            hub.publish(session.id, seq, turn_id, payload, *prev)

        journal = await _near_a_boundary(store, publish, session.id, RESERVE_BLOCK - 2)
        for call in ("c1", "c2"):
            await journal.send(
                ToolStateChanged(call_id=call, call_index=0, name="bash", state="input-streaming")
            )
        assert order[-1] == RESERVE_BLOCK

        def running(call: str) -> ToolStateChanged:
            return ToolStateChanged(call_id=call, call_index=0, name="bash", state="running")

        # Two tool calls start at once: their states are sent by two tasks.
        first = asyncio.create_task(journal.send(running("c1")))
        await gated.entered.wait()  # the first is reserving the next block
        second = asyncio.create_task(journal.send(running("c2")))
        await asyncio.sleep(0)  # the second runs up to its first wait
        if len(gated.calls) == 2:  # it waits for the same reservation: let it finish
            gated.gate.set()
        await asyncio.gather(first, second)
        await journal.aclose()
        assert journal.failure is None

        boundary = order[order.index(RESERVE_BLOCK) + 1 :]
        assert sorted(boundary) == [RESERVE_BLOCK + 1, RESERVE_BLOCK + 2]
        assert boundary == sorted(boundary), f"published out of order: {boundary}"
        feed = hub.feed(session.id)
        assert [f.seq for f in feed.after(RESERVE_BLOCK)] == [RESERVE_BLOCK + 1, RESERVE_BLOCK + 2]
        # Both numbers are reserved (a crash now would number recovery's events after them).
        assert await store.next_event_seq(session.id) > RESERVE_BLOCK + 2


async def test_a_workers_flush_cancelled_while_numbers_are_reserved_loses_no_text(
    new_store: Callable[..., Store],
) -> None:
    gated = GatedReservations()
    async with new_store() as store:
        gated.wrap(store)
        session = await store.create_session(workdir="/w", model="m")
        order = Published()
        journal = await _near_a_boundary(store, order, session.id, RESERVE_BLOCK - 2)

        def worker(event: Any) -> WorkerEvent:
            return WorkerEvent(call_id="task-1", worker=0, event=event)

        await journal.send(
            worker(TurnStarted(turn_id="w", session_id=session.id, user_message=None))
        )
        await journal.send(worker(StepStarted(step=1)))
        assert order.seqs[-1] == RESERVE_BLOCK
        await journal.send(worker(TextDelta(text="the worker's text")))
        answer = assistant_message([TextBlock(text="the worker's text")])
        # The worker's message writes its text first, which needs the next block of numbers;
        # the turn is interrupted (Esc) right then.
        cut = asyncio.create_task(journal.send(worker(AssistantMessage(message=answer))))
        await gated.entered.wait()
        cut.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await cut
        gated.gate.set()
        await journal.send(Done(text="", usage=Usage()))
        await journal.aclose()
        assert journal.failure is None
        texts = [
            r.payload["event"]["text"]
            for r in await store.events_after(session.id)
            if r.type == "worker" and r.payload["event"]["type"] == "text_delta"
        ]
        assert texts == ["the worker's text"]
        assert order.seqs == sorted(order.seqs)


# -- a COMMIT whose acknowledgement is lost ---------------------------------------------------


@pytest.fixture
async def proxied(
    pg_cluster: pg.PgCluster, pg_url: str
) -> AsyncIterator[tuple[CommitAckProxy, PostgresStore]]:
    proxy = CommitAckProxy(pg_cluster.port, pg_cluster.url())
    store = PostgresStore(proxy.url(pg_url))
    try:
        async with store:
            yield proxy, store
    finally:
        proxy.close()


#: Which write loses its COMMIT's acknowledgement: a predicate over its statements.
LOST_ACKS: dict[str, Callable[[list[str]], bool]] = {
    "text flush": lambda sql: (
        any("INSERT INTO partial_text" in s for s in sql)
        and not any("INSERT INTO messages" in s for s in sql)
    ),
    "assistant message": lambda sql: any("INSERT INTO messages" in s for s in sql),
    "end of the turn": lambda sql: any("UPDATE turns SET status" in s for s in sql),
}


@pytest.mark.parametrize("deliver", [True, False], ids=["answer lost", "commit lost"])
@pytest.mark.parametrize("lost", sorted(LOST_ACKS))
async def test_a_commit_whose_acknowledgement_is_lost_is_made_once(
    proxied: tuple[CommitAckProxy, PostgresStore], lost: str, deliver: bool
) -> None:
    """``answer lost``: the server committed, the write must not be made again; ``commit
    lost``: it did not, the write must be made again — once."""
    proxy, store = proxied
    session = await store.create_session(workdir="/w", model="m")
    turn = await store.begin_turn(session.id, user_message("go"), A, 30)
    published = Published()
    journal = Journal(
        store, session.id, turn_id=turn.id, owner=A, flush_bytes=64, publish=published
    )
    proxy.arm(LOST_ACKS[lost], deliver=deliver)
    await journal.send(TurnStarted(turn_id=turn.id, session_id=session.id, user_message=None))
    await journal.send(StepStarted(step=1))
    words = [f"word{i:02d} " for i in range(40)]
    for word in words:
        await journal.send(TextDelta(text=word))
    answer = "".join(words)
    message = assistant_message([TextBlock(text=answer)])
    await journal.send(AssistantMessage(message=message))
    await journal.send(Done(text=answer, usage=Usage()))
    await journal.aclose()

    assert proxy.dropped.is_set(), "the fault was not injected"
    assert journal.failure is None, journal.failure
    assert journal.ended
    (stored,) = list(await store.turns(session.id))
    assert stored.status == "completed"
    messages = await store.turn_messages(turn.id)
    assert [(m.message, m.partial) for m in messages] == [(message, False)]
    rows = await store.events_after(session.id)
    keys = Counter((r.seq, r.type) for r in rows)
    assert not [key for key, n in keys.items() if n > 1], "a row logged twice"
    # Every number published is in the log once, and the text reads back once.
    numbers = [n for r in rows for n in range(r.seq, r.end_seq + 1)]
    assert sorted(set(numbers)) == sorted(published.seqs)
    streamed = "".join(str(r.payload["text"]) for r in rows if r.type == "text_delta" and r.seq > 0)
    assert streamed == answer
    assert [r.type for r in rows].count("done") == 1
