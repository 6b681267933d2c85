"""``output_type=``: the final answer is JSON validated against a pydantic model, asked for with
each protocol's native structured output (through the real SDKs and the fake server, whose
validators check the request fields as the APIs do), corrected once, then a clear failure —
every step journaled like any turn."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, Field

from drover import Agent, Done, Event, RunResult, ToolContext, tool
from drover.config.settings import Config
from drover.testing.scripted import Reply, ScriptedProvider, call
from drover.testing.server import FakeLLMServer

PROTOCOLS = ["anthropic", "openai", "openai-responses"]
SYSTEM = "You answer about cities."
PARIS = '{"name": "Paris", "population": 2100000}'


class City(BaseModel):
    """A city and how many live there."""

    name: str
    population: int = Field(ge=0)


class Country(BaseModel):
    name: str
    capital: City | None = None


def agent_for(protocol: str, fake_llm: FakeLLMServer, tmp_path: Path) -> Agent[City]:
    base_url = fake_llm.anthropic_base_url if protocol == "anthropic" else fake_llm.openai_base_url
    return Agent(
        f"{protocol}:model-test",
        tools=[],
        system_prompt=SYSTEM,
        store=str(tmp_path / "journal.db"),
        workdir=tmp_path,
        base_url=base_url,
        config=Config(),
        output_type=City,
    )


def native_format(protocol: str, body: dict[str, Any]) -> dict[str, Any]:
    """The JSON schema the request asked for with the protocol's own structured output."""
    if protocol == "anthropic":
        fmt = body["output_config"]["format"]
        assert fmt["type"] == "json_schema"
        return dict(fmt["schema"])
    if protocol == "openai":
        fmt = body["response_format"]
        assert fmt["type"] == "json_schema"
        assert (fmt["json_schema"]["name"], fmt["json_schema"]["strict"]) == ("City", True)
        return dict(fmt["json_schema"]["schema"])
    fmt = body["text"]["format"]
    assert (fmt["type"], fmt["name"], fmt["strict"]) == ("json_schema", "City", True)
    return dict(fmt["schema"])


def last_user_text(protocol: str, body: dict[str, Any]) -> str:
    """The text of the last message of a request (the correction, after a bad answer)."""
    if protocol == "openai-responses":
        item = body["input"][-1]
        content = item["content"]
        return content if isinstance(content, str) else content[0]["text"]
    message = body["messages"][-1]
    content = message["content"]
    return content if isinstance(content, str) else content[0]["text"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_valid_answer_is_the_output(
    protocol: str, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.script({"text": PARIS})
    async with agent_for(protocol, fake_llm, tmp_path) as agent:
        result = await agent.run("Which city?")
    assert result.status == "completed"
    assert result.output == City(name="Paris", population=2100000)
    assert result.text == PARIS
    (request,) = fake_llm.requests
    schema = native_format(protocol, request.body)
    assert set(schema["properties"]) == {"name", "population"}
    assert schema["additionalProperties"] is False
    assert SYSTEM in json.dumps(request.body)  # the system prompt as given: no instruction added


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_an_invalid_answer_is_corrected_once_and_journaled(
    protocol: str, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.script({"text": '{"name": "Paris"}'}, {"text": PARIS})
    async with agent_for(protocol, fake_llm, tmp_path) as agent:
        result = await agent.run("Which city?")
        stored = await agent.store.turn_messages(result.turn_id)
    assert (result.status, result.output) == ("completed", City(name="Paris", population=2100000))
    first, second = fake_llm.requests
    correction = last_user_text(protocol, second.body)
    assert "population: Field required" in correction
    assert native_format(protocol, second.body) == native_format(protocol, first.body)
    # The journal holds the whole exchange; the answer is the validated JSON text.
    roles_texts = [(m.message.role, m.message.text) for m in stored]
    assert roles_texts == [
        ("assistant", '{"name": "Paris"}'),
        ("user", correction),
        ("assistant", PARIS),
    ]
    # A new process on the same journal sees the same committed history.
    fake_llm.script({"text": '{"name": "Lyon", "population": 520000}'})
    async with agent_for(protocol, fake_llm, tmp_path) as again:
        session = await again.session(result.session_id)
        history = [m.text for m in session.history]
        assert history == ["Which city?", *(t for _, t in roles_texts)]
        following = await session.run("And the next one?")
    assert following.output == City(name="Lyon", population=520000)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_an_answer_still_invalid_after_the_correction_ends_the_turn(
    protocol: str, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.script({"text": "Paris, I think."}, {"text": '{"name": "Paris", "population": -1}'})
    async with agent_for(protocol, fake_llm, tmp_path) as agent:
        result = await agent.run("Which city?")
        (turn,) = await agent.store.turns(result.session_id)
    assert len(fake_llm.requests) == 2
    assert (result.status, result.reason, result.output) == (
        "incomplete",
        "invalid_output",
        None,
    )
    assert result.error is not None
    assert result.error.startswith("the final answer was not valid City JSON after a correction")
    assert "population: Input should be greater than or equal to 0" in result.error
    assert result.text == '{"name": "Paris", "population": -1}'
    assert [m.role for m in result.pending] == ["user", "assistant", "user", "assistant"]
    assert (turn.status, turn.reason) == ("incomplete", "invalid_output")


async def test_the_output_type_of_a_run_overrides_the_agents(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.script(
        {"text": '{"name": "France", "capital": {"name": "Paris", "population": 1}}'},
        {"text": "Just text."},
    )
    async with agent_for("openai", fake_llm, tmp_path) as agent:
        country = await agent.run("Which country?", output_type=Country)
        text = await agent.run("Say something.", output_type=str)
    assert country.output == Country(name="France", capital=City(name="Paris", population=1))
    assert text.output == "Just text."
    first, second = fake_llm.requests
    assert first.body["response_format"]["json_schema"]["name"] == "Country"
    assert "response_format" not in second.body


@tool(read_only=True)
async def census(ctx: ToolContext, city: str) -> str:
    """Look up a city's population.

    Args:
        city: The city.
    """
    return "2100000"


async def test_tools_run_before_the_structured_answer_and_a_stream_carries_it(
    tmp_path: Path,
) -> None:
    provider = ScriptedProvider(
        [Reply(calls=[call("census", city="Paris")]), Reply(text=f"```json\n{PARIS}\n```")]
    )
    agent = Agent(provider, tools=[census], store=":memory:", workdir=tmp_path, config=Config())
    events: list[Event] = []
    async with agent, agent.run_stream("Which city?", output_type=City) as stream:
        async for event in stream:
            events.append(event)
    result: RunResult[City] = stream.result
    assert result.output == City(name="Paris", population=2100000)
    done = events[-1]
    assert isinstance(done, Done) and done.output == result.output
    assert [r.output is not None for r in provider.requests] == [True, True]
    assert provider.requests[0].output is not None
    assert provider.requests[0].output.name == "City"


async def test_without_an_output_type_the_output_is_the_text(tmp_path: Path) -> None:
    provider = ScriptedProvider([Reply(text="Hello.")])
    async with Agent(provider, tools=[], store=":memory:", workdir=tmp_path) as agent:
        result = await agent.run("hi")
    assert (result.output, provider.requests[0].output) == ("Hello.", None)


@pytest.mark.parametrize("bad", [int, dict, "City", City(name="x", population=1)])
def test_an_output_type_must_be_a_pydantic_model(bad: Any) -> None:
    with pytest.raises(TypeError, match="output_type must be a pydantic model class"):
        Agent(ScriptedProvider([]), output_type=bad)


async def test_an_interruption_while_the_correction_is_sent_keeps_it_pending(
    tmp_path: Path,
) -> None:
    """Cut at the new await of the turn (a consumer handling the correction): the correction
    is part of the turn's work, in memory and in the journal, and a resume answers it."""
    provider = ScriptedProvider([Reply(text='{"name": "Paris"}'), Reply(text=PARIS)])
    db = str(tmp_path / "journal.db")
    agent = Agent(provider, tools=[], store=db, workdir=tmp_path, config=Config())
    async with agent:
        session = await agent.session()
        cut: list[str] = []

        class CutAtCorrection:
            async def send(self, event: Event) -> None:
                message = getattr(event, "message", None)
                if event.type == "tool_results" and message is not None:
                    cut.append(message.text)
                    running.interrupt()
                    await asyncio.sleep(0)

        running = session.start("Which city?", live=[CutAtCorrection()], output_type=City)
        assert running.task is not None
        with pytest.raises(asyncio.CancelledError):
            await running.task
        assert running.end is not None and running.end.type == "incomplete"
        memory = [m.text for m in session.pending]
    assert len(cut) == 1 and "population: Field required" in cut[0]
    assert memory == ["Which city?", '{"name": "Paris"}', cut[0]]
    async with Agent(provider, tools=[], store=db, workdir=tmp_path, config=Config()) as again:
        reloaded = await again.session(session.id)
        assert [m.text for m in reloaded.pending] == memory
        resumed = await reloaded.resume(output_type=City)
    assert resumed.output == City(name="Paris", population=2100000)
    # The resume sent the correction last: the model answers it.
    assert provider.requests[-1].messages[-1].text == cut[0]
