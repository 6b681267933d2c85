"""Session holds in the store, on every backend: a hold refuses every turn start but one given
its token (which takes it over), and other holds; it cannot be taken while a turn runs but the
one it follows; a hold of a dead process or past its lease counts for nothing; a rewind's marks
end its hold, and are refused when the turns are not those it planned."""

from __future__ import annotations

import socket

import pytest

from drover.core.messages import user_message
from drover.errors import SessionBusyError, SessionHeldError, StoreError
from drover.journal.protocol import Store
from drover.journal.writes import EndTurn

OWNER = "test-host:1:1"
#: A process of this machine that is not running (its pid is past any pid Linux hands out).
DEAD = f"{socket.gethostname()}:4999999:1"


async def _session(store: Store) -> str:
    return (await store.create_session(workdir="/w", model="m")).id


async def test_a_hold_refuses_every_start_but_its_own(store: Store) -> None:
    sid = await _session(store)
    await store.hold_session(sid, "mine", OWNER, 30)
    with pytest.raises(SessionHeldError) as refused:
        await store.begin_turn(sid, user_message("x"), OWNER, 30)
    assert refused.value.turn_id == ""  # no turn runs: none is named
    with pytest.raises(SessionHeldError):
        await store.hold_session(sid, "theirs", OWNER, 30)
    assert await store.renew_hold(sid, "mine", 30)
    assert not await store.renew_hold(sid, "theirs", 30)

    # The turn given the token takes the hold over: the session is then as after any start.
    turn = await store.begin_turn(sid, user_message("x"), OWNER, 30, hold="mine")
    assert not await store.renew_hold(sid, "mine", 30)
    with pytest.raises(SessionBusyError) as busy:
        await store.hold_session(sid, "theirs", OWNER, 30)
    assert busy.value.turn_id == turn.id
    # A hold may follow the turn it names (a message that stops it to go next).
    await store.hold_session(sid, "next", OWNER, 30, after=turn.id)
    await store.write_batch([EndTurn(turn_id=turn.id, status="interrupted", owner=OWNER)])
    with pytest.raises(SessionHeldError):
        await store.begin_turn(sid, user_message("queued"), OWNER, 30)
    await store.release_hold(sid, "next")
    await store.release_hold(sid, "next")  # (released already: nothing)
    await store.begin_turn(sid, user_message("now"), OWNER, 30)


async def test_a_hold_of_a_dead_process_or_past_its_lease_counts_for_nothing(store: Store) -> None:
    dead, lapsed = await _session(store), await _session(store)
    await store.hold_session(dead, "gone", DEAD, 30)
    await store.hold_session(lapsed, "late", OWNER, -1)
    for sid in (dead, lapsed):
        await store.hold_session(sid, "new", OWNER, 30)
        await store.begin_turn(sid, None, OWNER, 30, hold="new")


async def test_a_rewind_ends_its_hold_and_marks_only_what_it_planned(store: Store) -> None:
    sid = await _session(store)
    first = await store.begin_turn(sid, user_message("one"), OWNER, 30)
    await store.write_batch([EndTurn(turn_id=first.id, status="completed", owner=OWNER)])
    second = await store.begin_turn(sid, user_message("two"), OWNER, 30)
    await store.write_batch([EndTurn(turn_id=second.id, status="completed", owner=OWNER)])

    await store.hold_session(sid, "rewind", OWNER, 30)
    # Another's hold refuses the marks; a plan that is not what would be marked too.
    with pytest.raises(SessionHeldError):
        await store.rewind_turns(sid, first.id, hold="other")
    with pytest.raises(StoreError, match="changed since the rewind was planned"):
        await store.rewind_turns(sid, first.id, hold="rewind", planned=[first.id])
    assert not any(t.rewound for t in await store.turns(sid))

    rewound, _ = await store.rewind_turns(
        sid, first.id, hold="rewind", planned=[first.id, second.id]
    )
    assert rewound == [first.id, second.id]
    assert not await store.renew_hold(sid, "rewind", 30)  # ended with the marks
    await store.begin_turn(sid, user_message("again"), OWNER, 30)


async def test_a_queued_message_keeps_its_webhook_for_the_turn_that_runs_it(store: Store) -> None:
    sid = await _session(store)
    running = await store.begin_turn(sid, user_message("x"), OWNER, 30)
    own, _, _ = await store.enqueue_message(sid, "own", webhook="http://hooks.test/own")
    plain, _, _ = await store.enqueue_message(sid, "plain")
    assert (await store.queued_messages(sid))[0].webhook == "http://hooks.test/own"
    await store.write_batch([EndTurn(turn_id=running.id, status="completed", owner=OWNER)])

    server = "http://hooks.test/server"
    taken = await store.begin_turn(sid, None, OWNER, 30, webhook=server, claim=own.id)
    await store.write_batch([EndTurn(turn_id=taken.id, status="completed", owner=OWNER)])
    after = await store.begin_turn(sid, None, OWNER, 30, webhook=server, claim=plain.id)
    await store.write_batch([EndTurn(turn_id=after.id, status="completed", owner=OWNER)])
    # The message's own webhook, else the one the start was given (the server's).
    assert [d["url"] for d in await store.deliveries(taken.id)] == ["http://hooks.test/own"]
    assert [d["url"] for d in await store.deliveries(after.id)] == [server]
