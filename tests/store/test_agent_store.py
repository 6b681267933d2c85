"""``drover.Agent`` on a PostgreSQL URL: the same session continued by a second agent (another
process, as far as the journal can tell), on the suite's throwaway cluster."""

from __future__ import annotations

from pathlib import Path

from drover import Agent
from drover.config import Config
from drover.store.postgres import PostgresStore
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
