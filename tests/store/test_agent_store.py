"""``drover.Agent`` and its journal: on a PostgreSQL URL, the same session continued by a second
agent (another process, as far as the journal can tell), on the suite's throwaway cluster; and
a session deleted through the agent."""

from __future__ import annotations

from pathlib import Path

import pytest

from drover import Agent
from drover.config.settings import Config
from drover.errors import DroverError, SessionBusyError
from drover.store.postgres.store import PostgresStore
from drover.testing.scripted import Reply, ScriptedProvider


async def test_an_agent_on_a_postgresql_url(tmp_path: Path, pg_url: str) -> None:
    provider = ScriptedProvider([Reply(text="one"), Reply(text="two")])
    async with Agent(provider, tools=[], store=pg_url, workdir=tmp_path, config=Config()) as a:
        assert isinstance(a.store, PostgresStore)
        first = await a.run("1")
    async with Agent(provider, tools=[], store=pg_url, workdir=tmp_path, config=Config()) as b:
        second = await b.run("2", session=first.session_id)
        turns = await b.store.turns(first.session_id)
    assert (first.text, second.text) == ("one", "two")
    assert [t.status for t in turns] == ["completed", "completed"]
    assert [m.text for m in provider.requests[1].messages] == ["1", "one", "2"]


async def test_delete_session_refuses_a_running_turn_and_forgets_the_handle(
    tmp_path: Path,
) -> None:
    provider = ScriptedProvider([Reply(text="one"), Reply(text="two", stall_after=1)])
    store = str(tmp_path / "journal.db")
    async with Agent(provider, tools=[], store=store, workdir=tmp_path, config=Config()) as agent:
        first = await agent.run("1")
        session = await agent.session(first.session_id)
        running = session.start("2")
        # Asked before the turn is even recorded: refused all the same, naming it.
        with pytest.raises(SessionBusyError) as busy:
            await agent.delete_session(first.session_id)
        assert busy.value.turn_id == await running.wait_started()
        provider.release.set()
        await running.finished()
        assert await agent.delete_session(first.session_id) is True
        # The handle this agent held is gone with it: the id names no session any more.
        with pytest.raises(DroverError, match="no session"):
            await agent.session(first.session_id, must_exist=True)
        assert await agent.store.get_session(first.session_id) is None
        assert await agent.delete_session(first.session_id) is False
