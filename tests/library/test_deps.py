"""``deps=``: what a run gives its tools as ``ctx.deps`` — per turn, never journaled, seen by
the ``task`` tool's workers, and what a resume passes for the turn it resumes."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from drover import Agent, Event, TextDelta, ToolContext, tool
from drover.config.settings import Config
from drover.runtime.workers import Coordinator
from drover.testing.scripted import Reply, ScriptedProvider, call


@dataclass
class Deps:
    """What the tools need: a user name and a list the tools append to."""

    user: str
    seen: list[str] = field(default_factory=list)
    token: str = ""


@tool(read_only=True)
async def whoami(ctx: ToolContext[Deps]) -> str:
    """Say whose turn this is."""
    ctx.deps.seen.append(ctx.call_id)
    return ctx.deps.user


@tool(read_only=True)
async def has_deps(ctx: ToolContext) -> str:
    """Say whether the run was given deps."""
    return f"deps: {ctx.deps!r}"


def agent_for(provider: ScriptedProvider, tmp_path: Path, *extra: object) -> Agent:
    return Agent(
        provider,
        tools=[whoami, has_deps, *extra],  # type: ignore[list-item]
        store=str(tmp_path / "journal.db"),
        workdir=tmp_path,
        config=Config(),
    )


def two_turns() -> list[Reply]:
    """Two turns, each calling ``whoami`` once and then answering."""
    once = [Reply(calls=[call("whoami")]), Reply(text="done")]
    return [*once, *once]


def journal_bytes(tmp_path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in tmp_path.glob("journal.db*"))


def tool_output(provider: ScriptedProvider, request: int) -> str:
    """The output of the one tool result in the last message of request ``request``."""
    (result,) = provider.requests[request].messages[-1].tool_results
    return result.content


async def test_a_tool_sees_the_deps_of_its_run(tmp_path: Path) -> None:
    deps = Deps("ada")
    provider = ScriptedProvider(
        [
            Reply(calls=[call("whoami")]),
            Reply(text="You are ada."),
            Reply(calls=[call("has_deps")]),
            Reply(text="none"),
        ]
    )
    async with agent_for(provider, tmp_path) as agent:
        result = await agent.run("who am I?", deps=deps)
        assert result.text == "You are ada."
        assert tool_output(provider, 1) == "ada"
        assert deps.seen == ["call_1"]  # the very object, not a copy
        # The next turn gets only what its own run passes: here nothing.
        await agent.run("and now?", session=result.session_id)
    assert tool_output(provider, 3) == "deps: None"


async def test_each_turn_gets_its_own_deps(tmp_path: Path) -> None:
    provider = ScriptedProvider(two_turns())
    async with agent_for(provider, tmp_path) as agent:
        session = await agent.session()
        await session.run("first", deps=Deps("ada"))
        await session.run("second", deps=Deps("grace"))
    assert [tool_output(provider, 1), tool_output(provider, 3)] == ["ada", "grace"]


async def test_a_stream_and_a_started_turn_pass_their_deps(tmp_path: Path) -> None:
    provider = ScriptedProvider(two_turns())
    async with agent_for(provider, tmp_path) as agent:
        async with agent.run_stream("streamed", deps=Deps("ada")) as stream:
            async for _event in stream:
                pass
        session = await agent.session(stream.session_id)
        running = session.start("started", deps=Deps("grace"), on_permission=lambda _: "deny")
        assert running.task is not None
        await running.task
    assert [tool_output(provider, 1), tool_output(provider, 3)] == ["ada", "grace"]


async def test_a_resumed_turn_gets_the_deps_its_resume_passes(tmp_path: Path) -> None:
    provider = ScriptedProvider(
        [
            Reply(calls=[call("whoami")]),
            Reply(text="Half an ans", fail_after=3, fail_retryable=False),
            Reply(calls=[call("whoami")]),
            Reply(text="Done."),
        ]
    )
    first, second = Deps("ada"), Deps("grace")
    async with agent_for(provider, tmp_path) as agent:
        cut = await agent.run("go", deps=first)
        assert cut.status == "incomplete"
    # Another process (a new agent on the same journal) resumes it: the deps of the first
    # run were never kept anywhere, the resume's own are used.
    async with agent_for(provider, tmp_path) as again:
        done = await again.resume(cut.session_id, deps=second)
    assert done.status == "completed"
    assert (len(first.seen), len(second.seen)) == (1, 1)
    assert tool_output(provider, 3) == "grace"


async def test_deps_are_never_journaled(tmp_path: Path) -> None:
    deps = Deps("ada", token="s3cr3t-deps-value-7f1c")
    provider = ScriptedProvider([Reply(calls=[call("whoami")]), Reply(text="ok")])
    async with agent_for(provider, tmp_path) as agent:
        result = await agent.run("go", deps=deps)
    journal = journal_bytes(tmp_path)
    assert result.completed and deps.seen and b"whoami" in journal
    assert deps.token.encode() not in journal


async def test_workers_of_the_task_tool_see_the_parents_deps(tmp_path: Path) -> None:
    deps = Deps("ada")
    provider = ScriptedProvider(
        [
            Reply(calls=[call("task", description="ask", prompt="Who is the user?")]),
            Reply(calls=[call("whoami")]),  # the worker's first step
            Reply(text="The user is ada."),  # the worker's answer
            Reply(text="Your worker says: ada."),
        ]
    )
    seen: list[Event] = []

    class Sees:
        async def send(self, event: Event) -> None:
            if not isinstance(event, TextDelta):
                seen.append(event)

    async with agent_for(provider, tmp_path, Coordinator()) as agent:
        session = await agent.session(on_permission=lambda _: "allow")
        result = await session.run("ask a worker", deps=deps, live=[Sees()])
    assert result.text == "Your worker says: ada."
    assert deps.seen == ["call_2"]
    assert tool_output(provider, 2) == "ada"
    assert any(e.type == "worker" for e in seen)
