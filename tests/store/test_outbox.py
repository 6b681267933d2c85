"""The webhook outbox on every backend: a turn begun with a webhook is announced by whatever
ends it (its own end, recovery), in the same transaction; deliveries are claimed by one
deliverer at a time, retried when due, and settled only by the claim's holder."""

from __future__ import annotations

import json

import support.writes as writes

from drover.core.messages import Usage, user_message
from drover.journal.protocol import Store

from .conftest import StoreFactory
from .test_store_recovery import dead_process, this_process

OWNER = "elsewhere:42:7"
HOOK = "http://127.0.0.1:9/hook"


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


async def _session(store: Store) -> str:
    return (await store.create_session(workdir="/w", model="m")).id


async def test_the_end_of_a_turn_writes_its_announcement(store: Store) -> None:
    sid = await _session(store)
    plain = await store.begin_turn(sid, user_message("no hook"), OWNER, 30)
    await writes.end_turn(store, plain.id, "completed")
    assert await store.deliveries() == []

    hooked = await store.begin_turn(sid, user_message("hook"), OWNER, 30, webhook=HOOK)
    # Nothing to announce while it runs.
    assert await store.deliveries() == []
    usage = Usage(input_tokens=12, output_tokens=3)
    await writes.end_turn(store, hooked.id, "completed", usage=usage, event={"type": "done"})
    (row,) = await store.deliveries(hooked.id)
    assert row["url"] == HOOK and row["attempts"] == 0 and row["delivered_at"] is None
    (claimed,) = await store.claim_deliveries("d1", 30)
    body = json.loads(claimed.body)
    assert body["id"] == claimed.id == row["id"]
    assert body["type"] == "turn.ended"
    assert (body["session_id"], body["turn_id"], body["status"]) == (sid, hooked.id, "completed")
    assert body["usage"]["input_tokens"] == 12 and body["usage"]["output_tokens"] == 3
    assert isinstance(body["ended_at"], float)


async def test_a_recovered_turn_is_announced_too(store: Store) -> None:
    sid = await _session(store)
    turn = await store.begin_turn(sid, user_message("dies"), OWNER, 30, webhook=HOOK)
    assert await store.recover_orphans(lambda owner: False) == [turn.id]
    (claimed,) = await store.claim_deliveries("d1", 30)
    body = json.loads(claimed.body)
    assert (body["turn_id"], body["status"], body["reason"]) == (
        turn.id,
        "interrupted",
        "interrupted",
    )


async def test_claims_retries_and_settling(make_store: StoreFactory) -> None:
    clock = Clock(1000.0)
    async with make_store(clock=clock) as store:
        sid = await _session(store)
        turn = await store.begin_turn(sid, user_message("x"), OWNER, 30, webhook=HOOK)
        await writes.end_turn(store, turn.id, "failed", error="boom")
        (first,) = await store.claim_deliveries("a", 30)
        assert await store.claim_deliveries("b", 30) == []  # claimed by a
        assert await store.settle_delivery(first.id, "a", error="HTTP 500", retry_at=1010.0)
        assert await store.claim_deliveries("b", 30) == []  # not due yet
        clock.now = 1010.0
        (again,) = await store.claim_deliveries("b", 30)
        assert again.id == first.id and again.attempts == 1 and again.body == first.body
        # A claim that ran out passes to another deliverer; the first can no longer settle.
        clock.now = 1041.0
        (third,) = await store.claim_deliveries("c", 30)
        assert not await store.settle_delivery(third.id, "b", error=None, retry_at=None)
        assert await store.settle_delivery(third.id, "c", error=None, retry_at=None)
        clock.now = 5000.0
        assert await store.claim_deliveries("d", 30) == []
        (row,) = await store.deliveries()
        assert row["delivered_at"] == 1041.0 and row["attempts"] == 2

        # Given up: never claimed again.
        other = await store.begin_turn(sid, user_message("y"), OWNER, 30, webhook=HOOK)
        await writes.end_turn(store, other.id, "completed")
        (last,) = await store.claim_deliveries("a", 30)
        assert await store.settle_delivery(last.id, "a", error="HTTP 404", retry_at=None)
        clock.now = 9000.0
        assert await store.claim_deliveries("a", 30) == []
        (given_up,) = await store.deliveries(other.id)
        assert given_up["failed_at"] == 5000.0 and given_up["last_error"] == "HTTP 404"


async def test_a_claim_of_a_dead_process_is_free_at_once(store: Store) -> None:
    sid = await _session(store)
    turn = await store.begin_turn(sid, user_message("x"), OWNER, 30, webhook=HOOK)
    await writes.end_turn(store, turn.id, "completed")
    (first,) = await store.claim_deliveries(this_process(), 30)
    assert await store.claim_deliveries("another", 30) == []  # a live claimer holds it
    # Its claim is the only one of a process that died (killed mid-delivery, say).
    other = await store.begin_turn(sid, user_message("y"), OWNER, 30, webhook=HOOK)
    await writes.end_turn(store, other.id, "completed")
    (second,) = await store.claim_deliveries(dead_process(), 30)
    (again,) = await store.claim_deliveries("another", 30)
    assert again.id == second.id != first.id


async def test_a_claim_takes_one_delivery_per_receiver(store: Store) -> None:
    """The oldest due delivery of each receiver, the longest due receiver first, leaving out
    the receivers the claimer sends to now (one attempt at a time to each)."""
    sid = await _session(store)
    slow, fast = "http://127.0.0.1:9/slow", "http://127.0.0.1:9/fast"
    ids = []
    for url in (slow, slow, fast, slow):
        turn = await store.begin_turn(sid, user_message("x"), OWNER, 30, webhook=url)
        await writes.end_turn(store, turn.id, "completed")
        (row,) = await store.deliveries(turn.id)
        ids.append(row["id"])
    first, fast_id = ids[0], ids[2]
    assert [(d.id, d.url) for d in await store.claim_deliveries("a", 30, 1)] == [(first, slow)]
    # The slow receiver's next delivery waits for the first: only the fast one is taken.
    taken = await store.claim_deliveries("a", 30, 4, busy=[slow])
    assert [d.id for d in taken] == [fast_id]
    assert await store.settle_delivery(first, "a", error=None, retry_at=None)
    (second,) = await store.claim_deliveries("a", 30, 4, busy=[fast])
    assert second.id == ids[1]
    assert await store.claim_deliveries("a", 30, 4, busy=[fast, slow]) == []
