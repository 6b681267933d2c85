"""The store's queue of messages, on every backend: queued in order, announced in the log only
while no turn runs, claimed once in the same transaction as a turn's start, cancelled and kept."""

from __future__ import annotations

import asyncio

import pytest
from support.writes import end_turn

from drover.core.messages import user_message
from drover.errors import QueueChangedError, SessionBusyError
from drover.journal.protocol import Store

from .conftest import StoreFactory

OWNER = "elsewhere:42:7"


async def _session(store: Store) -> str:
    return (await store.create_session(workdir="/w", model="fake:m")).id


async def test_messages_queue_in_order_and_are_announced_only_while_idle(store: Store) -> None:
    sid = await _session(store)
    first, running, logged = await store.enqueue_message(sid, "one")
    assert running is None and logged is not None
    assert logged.payload == {"type": "message_queued", "message_id": first.id, "content": "one"}
    assert logged.seq == await store.last_event_seq(sid)
    turn = await store.begin_turn(sid, user_message("x"), OWNER, 30)
    second, running, logged = await store.enqueue_message(sid, "two")
    # A turn runs: its journal is the log's one writer, the store logs nothing.
    assert running == turn.id and logged is None
    assert [(m.content, m.seq) for m in await store.queued_messages(sid)] == [
        ("one", 1),
        ("two", 2),
    ]
    assert await store.waiting_sessions() == []  # its turn runs
    await end_turn(store, turn.id, "completed")
    assert await store.waiting_sessions() == [sid]
    assert second.status == "queued"


async def test_a_turn_claims_only_the_next_message_and_only_once(
    make_store: StoreFactory,
) -> None:
    async with make_store() as a, make_store() as b:
        sid = await _session(a)
        head, _, _ = await a.enqueue_message(sid, "one")
        after, _, _ = await a.enqueue_message(sid, "two")
        with pytest.raises(QueueChangedError):
            await a.begin_turn(sid, user_message("two"), OWNER, 30, claim=after.id)
        assert await a.turns(sid) == []  # nothing started
        # Two processes race to run the head: one turn starts, the other is refused.
        results = await asyncio.gather(
            a.begin_turn(sid, user_message("one"), OWNER, 30, claim=head.id),
            b.begin_turn(sid, user_message("one"), OWNER, 30, claim=head.id),
            return_exceptions=True,
        )
        started = [r for r in results if not isinstance(r, BaseException)]
        refused = [r for r in results if isinstance(r, BaseException)]
        assert len(started) == 1 and len(refused) == 1
        assert isinstance(refused[0], SessionBusyError | QueueChangedError)
        every = await a.queued_messages(sid, every=True)
        assert [(m.content, m.status, m.turn_id) for m in every] == [
            ("one", "started", started[0].id),
            ("two", "queued", None),
        ]
        assert [m.content for m in await a.queued_messages(sid)] == ["two"]


async def test_a_cancelled_message_stays_marked_and_is_never_claimed(store: Store) -> None:
    sid = await _session(store)
    gone, _, _ = await store.enqueue_message(sid, "dropped")
    kept, _, _ = await store.enqueue_message(sid, "kept")
    done, running, logged = await store.cancel_queued(sid, gone.id)
    assert done and running is None and logged is not None
    assert logged.payload == {"type": "message_cancelled", "message_id": gone.id}
    assert (await store.cancel_queued(sid, gone.id))[0] is False
    assert (await store.cancel_queued(sid, "no-such-id"))[0] is False
    with pytest.raises(QueueChangedError):
        await store.begin_turn(sid, user_message("dropped"), OWNER, 30, claim=gone.id)
    await store.begin_turn(sid, user_message("kept"), OWNER, 30, claim=kept.id)
    every = await store.queued_messages(sid, every=True)
    assert [(m.content, m.status) for m in every] == [("dropped", "cancelled"), ("kept", "started")]


async def test_a_deleted_session_takes_its_queue(store: Store) -> None:
    sid = await _session(store)
    await store.enqueue_message(sid, "one")
    assert await store.delete_session(sid)
    assert await store.queued_messages(sid, every=True) == []
    assert await store.waiting_sessions() == []
