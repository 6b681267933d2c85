"""What server processes sharing a PostgreSQL journal ask of it (the public
:class:`~drover.cluster.claims.ClusterJournal` protocol): which process runs a session's turn,
and control messages between processes. SQLite is no shared journal."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from support.writes import end_turn

from drover.cluster.claims import is_shared
from drover.core.messages import user_message
from drover.store.postgres.store import PostgresStore
from drover.store.sqlite.store import SqliteStore

BOUND = 30


@pytest.fixture
async def store(pg_url: str) -> AsyncIterator[PostgresStore]:
    async with PostgresStore(pg_url) as opened:
        yield opened


def test_only_postgresql_is_a_shared_journal(tmp_path: Path) -> None:
    assert is_shared(PostgresStore("postgresql://nowhere/none"))
    assert not is_shared(SqliteStore(tmp_path / "j.db"))


async def test_the_running_turn_of_a_session_and_its_owner(store: PostgresStore) -> None:
    a = await store.create_session(workdir="/w", model="m")
    b = await store.create_session(workdir="/w", model="m")
    idle = await store.create_session(workdir="/w", model="m")
    first = await store.begin_turn(a.id, user_message("one"), "host:1:1", 60)
    await end_turn(store, first.id, "completed")
    running = await store.begin_turn(a.id, user_message("two"), "host:2:2", 60)
    other = await store.begin_turn(b.id, user_message("go"), "host:3:3", 60)
    assert await store.running_turn(a.id) == (running.id, "host:2:2")
    assert await store.running_turn(idle.id) is None
    assert await store.running_turns([a.id, b.id, idle.id]) == {a.id: running.id, b.id: other.id}
    assert await store.running_turns([]) == {}


async def test_a_control_message_reaches_every_listener(store: PostgresStore) -> None:
    got: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def handler(message: dict[str, Any]) -> None:
        await got.put(message)

    listening = asyncio.create_task(store.listen(handler, retry=0.05))
    try:
        # A listener connects on its own: send until it hears one (NOTIFY reaches only those
        # listening when it commits), then the next one is heard as sent.
        async def first() -> dict[str, Any]:
            while True:
                await store.notify({"type": "ping"})
                try:
                    return await asyncio.wait_for(got.get(), timeout=0.2)
                except TimeoutError:
                    continue

        assert await asyncio.wait_for(first(), BOUND) == {"type": "ping"}
        await store.notify({"type": "interrupt", "owner": "host:1:1", "session_id": "s"})
        while (message := await asyncio.wait_for(got.get(), BOUND)) == {"type": "ping"}:
            pass
        assert message == {"type": "interrupt", "owner": "host:1:1", "session_id": "s"}
    finally:
        listening.cancel()
        with pytest.raises(asyncio.CancelledError):
            await listening
    with pytest.raises(ValueError, match="too large"):
        await store.notify({"type": "x", "body": "y" * 8000})
