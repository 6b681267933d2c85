"""Input of ``test_typing.py``: the library as a user's strictly type-checked code writes it.

Each ``reveal_type`` line ends with a comment giving, after an arrow, the type mypy must
reveal; each line mypy must refuse ends with one naming the error code it must give; every
other line must check cleanly. Never run: mypy reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import reveal_type

from pydantic import BaseModel

from drover import Agent, EndReason, RunResult, Session, ToolContext, tool


@dataclass
class Deps:
    db: dict[str, int]


class Answer(BaseModel):
    value: int


class Other(BaseModel):
    note: str


@tool
async def lookup(ctx: ToolContext[Deps], key: str) -> str:
    """Look a key up."""
    reveal_type(ctx.deps)  # -> typed_api.Deps
    return str(ctx.deps.db[key])


@tool
async def untyped(ctx: ToolContext, key: str) -> str:
    """A tool that takes no deps."""
    reveal_type(ctx.deps)  # -> None
    return key


@tool
async def wrong(ctx: ToolContext[Deps], key: str) -> str:
    """Uses deps it does not have."""
    return str(ctx.deps.cache[key])  # error: attr-defined


async def main() -> None:
    plain = Agent("openai:gpt-x", tools=[lookup, untyped])
    reveal_type(plain)  # -> drover.agent.agent.Agent[str]
    text = await plain.run("hi", deps=Deps({"a": 1}))
    reveal_type(text)  # -> drover.agent.result.RunResult[str]
    reveal_type(text.output)  # -> str | None
    reason: EndReason | None = text.reason
    reveal_type(text.pending)  # -> tuple[drover.core.messages.Message, ...]
    once = await plain.run("hi", output_type=Answer)
    reveal_type(once.output)  # -> typed_api.Answer | None

    typed = Agent("openai:gpt-x", output_type=Answer)
    reveal_type(typed)  # -> drover.agent.agent.Agent[typed_api.Answer]
    answer = await typed.run("hi")
    reveal_type(answer.output)  # -> typed_api.Answer | None
    other = await typed.run("hi", output_type=Other)
    reveal_type(other.output)  # -> typed_api.Other | None
    resumed = await typed.resume("id", deps=Deps({}))
    reveal_type(resumed)  # -> drover.agent.result.RunResult[typed_api.Answer]
    reveal_type(typed.run_sync("hi"))  # -> drover.agent.result.RunResult[typed_api.Answer]

    session = await typed.session()
    reveal_type(session)  # -> drover.agent.session.Session[typed_api.Answer]
    other_run = await session.run("hi", output_type=Other)
    reveal_type(other_run)  # -> drover.agent.result.RunResult[typed_api.Other]
    async with typed.run_stream("hi") as stream:
        async for _ in stream:
            pass
    reveal_type(stream.result)  # -> drover.agent.result.RunResult[typed_api.Answer]
    async with session.run_stream("hi", output_type=Other) as other_stream:
        pass
    reveal_type(other_stream.result.output)  # -> typed_api.Other | None

    kept: RunResult[Answer] = answer
    wrong_kind: RunResult[Other] = answer  # error: assignment
    bad_session: Session[Other] = session  # error: assignment
    Agent("openai:gpt-x", output_type=int)  # error: type-var
    del kept, wrong_kind, bad_session, reason
