"""A blank prompt — empty, or white space to ECMAScript's ``\\s`` or to Python's ``isspace`` —
is refused by every way the library sends one, with a ``ValueError`` that says so, before a
session or a turn is written and before the model is asked."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from drover import Agent, ToolContext, tool
from drover.config.settings import Config
from drover.core.messages import Message, TextBlock
from drover.errors import BlankPromptError, DroverError, PromptTextError
from drover.runtime.turns import RunningTurn
from drover.testing.scripted import Reply, ScriptedProvider, call

#: Seconds: a failure bound for a wait, never a synchronisation.
BOUND = 60.0

#: White space of both kinds: ASCII, U+0085 and U+001C-U+001F (Python's only), U+FEFF
#: (ECMAScript's only), and the Unicode separators.
BLANKS = ["", "   ", "\t\r\n", "\u0085", "\u001c\u001f", "\ufeff", "\u2028\u2029\u3000\u00a0"]

GATE: dict[str, asyncio.Event] = {}


@tool()
async def slow(ctx: ToolContext) -> str:
    """Wait until the test lets the call finish."""
    GATE["entered"].set()
    await GATE["go"].wait()
    return "slow done"


def agent_for(provider: ScriptedProvider, tmp_path: Path) -> Agent:
    return Agent(
        provider,
        tools=[slow],
        store=str(tmp_path / "journal.db"),
        workdir=tmp_path,
        config=Config(),
        permission_mode="allow",
    )


@pytest.mark.parametrize("text", BLANKS)
async def test_a_blank_prompt_to_run_creates_no_session_and_asks_no_model(
    tmp_path: Path, text: str
) -> None:
    provider = ScriptedProvider([])
    async with agent_for(provider, tmp_path) as agent:
        with pytest.raises(ValueError, match="the prompt is blank"):
            await agent.run(text)
        assert await agent.store.list_sessions() == []
    assert provider.requests == []


async def test_every_way_of_sending_a_blank_prompt_writes_no_turn(tmp_path: Path) -> None:
    provider = ScriptedProvider([])
    blank_message = Message(role="user", content=(TextBlock(text=" \u0085 "),))
    async with agent_for(provider, tmp_path) as agent:
        session = await agent.session()
        sends = {
            "Agent.run": lambda: agent.run("  ", session=session.id),
            "Session.run": lambda: session.run("\ufeff"),
            "Session.submit": lambda: session.submit("\u2028", if_busy="enqueue"),
            "a message": lambda: session.run(blank_message),
        }
        for name, send in sends.items():
            with pytest.raises(ValueError, match="the prompt is blank"):
                await send()
            assert await agent.store.turns(session.id) == [], name
        with pytest.raises(ValueError, match="the prompt is blank"):
            session.start(" ")
        with pytest.raises(ValueError, match="the prompt is blank"):
            agent.run_stream("\n", session=session.id)
        assert await agent.store.turns(session.id) == []
        assert await session.queued() == []
    assert provider.requests == []


def test_run_sync_refuses_a_blank_prompt_before_opening_the_journal(tmp_path: Path) -> None:
    agent = agent_for(ScriptedProvider([]), tmp_path)
    with pytest.raises(ValueError, match="the prompt is blank"):
        agent.run_sync("\u3000")
    assert not (tmp_path / "journal.db").exists()


async def test_a_blank_message_does_not_interrupt_the_running_turn(tmp_path: Path) -> None:
    GATE["entered"], GATE["go"] = asyncio.Event(), asyncio.Event()
    provider = ScriptedProvider([Reply(calls=[call("slow")]), Reply(text="finished")])
    async with agent_for(provider, tmp_path) as agent:
        session = await agent.session()
        running = await session.submit("work")
        assert isinstance(running, RunningTurn)
        await asyncio.wait_for(GATE["entered"].wait(), BOUND)
        for if_busy in ("interrupt", "rollback"):
            with pytest.raises(ValueError, match="the prompt is blank"):
                await session.submit(" ", if_busy=if_busy)
        assert session.running is running
        GATE["go"].set()
        await asyncio.wait_for(running.finished(), BOUND)
        [turn] = await agent.store.turns(session.id)
        assert turn.status == "completed"


def test_the_refusal_is_also_a_drover_error() -> None:
    """The command line and the REPL print a drover error on one line."""
    assert issubclass(BlankPromptError, DroverError)
    assert issubclass(BlankPromptError, ValueError)


async def test_half_a_surrogate_pair_is_refused_as_no_text(tmp_path: Path) -> None:
    """A lone UTF-16 half (``"\\ud800"``) is no text: it is refused like a blank prompt, before
    anything is written (no journal could write it: it used to fail in the store)."""
    provider = ScriptedProvider([Reply(text="fine")])
    async with agent_for(provider, tmp_path) as agent:
        session = await agent.session()
        for text in ("hi \ud800 there", "\udfff", "a pair \ud83d\ude00 then a lone \udc00"):
            with pytest.raises(PromptTextError, match="half of a UTF-16 surrogate pair"):
                await session.run(text)
            with pytest.raises(ValueError, match="half of a UTF-16 surrogate pair"):
                await session.submit(text, if_busy="enqueue")
        assert await agent.store.turns(session.id) == []
        result = await session.run("smile \U0001f600")  # a whole character is text
        assert result.text == "fine"
    assert len(provider.requests) == 1
    assert issubclass(PromptTextError, DroverError)
