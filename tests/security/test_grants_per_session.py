"""An "always" belongs to the session it was given in, and lasts.

One :class:`~drover.Agent` serving several users (``examples/fastapi_app.py``'s pattern) must
not let user A's "always" run user B's calls unasked; a grant must survive a restart and be seen
by another process on the same journal; and it can be listed and withdrawn.
"""

from __future__ import annotations

from pathlib import Path

from drover import Agent, PermissionRequest, ToolContext, tool
from drover.config.settings import Config
from drover.testing.scripted import Reply, ScriptedProvider, call

DONE: list[str] = []


@tool
async def deploy(ctx: ToolContext, target: str) -> str:
    """Deploy somewhere (a side effect, so it asks first).

    Args:
        target: Where to deploy.
    """
    DONE.append(target)
    return f"deployed to {target}"


def _script(*targets: str) -> list[Reply]:
    replies: list[Reply] = []
    for target in targets:
        replies.append(Reply(text="Deploying.", calls=[call("deploy", target=target)]))
        replies.append(Reply(text="Done."))
    return replies


class Asker:
    """A permission handler that answers from a list and remembers what it was asked."""

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.asked: list[str] = []

    def __call__(self, request: PermissionRequest) -> str:
        self.asked.append(str(request.input.get("target")))
        return self.answers.pop(0)


def _agent(provider: ScriptedProvider, tmp_path: Path, asker: Asker | None = None) -> Agent:
    return Agent(
        provider,
        tools=[deploy],
        store=str(tmp_path / "journal.db"),
        workdir=tmp_path,
        on_permission=asker,  # type: ignore[arg-type]
        config=Config(),
    )


async def test_one_users_always_does_not_answer_for_another(tmp_path: Path) -> None:
    asker = Asker("always", "deny")
    async with _agent(ScriptedProvider(_script("a1", "b1", "a2")), tmp_path, asker) as agent:
        alice = await agent.session()
        bob = await agent.session()
        assert (await alice.run("deploy a1")).completed
        assert asker.asked == ["a1"]
        # Bob's call asks, though Alice said "always": Bob says no.
        assert (await bob.run("deploy b1")).completed
        assert asker.asked == ["a1", "b1"]
        # Alice's next call runs unasked.
        assert (await alice.run("deploy a2")).completed
        assert asker.asked == ["a1", "b1"]
        assert [g.rule for g in await alice.grants()] == ["deploy"]
        assert await bob.grants() == []


async def test_a_grant_outlives_the_process_and_can_be_withdrawn(tmp_path: Path) -> None:
    first = Asker("always")
    async with _agent(ScriptedProvider(_script("x1")), tmp_path, first) as agent:
        session_id = (await agent.session()).id
        assert (await agent.run("deploy x1", session=session_id)).completed
    # A new agent (another process, or this one restarted) on the same journal.
    again = Asker("deny")
    async with _agent(ScriptedProvider(_script("x2", "x3")), tmp_path, again) as agent:
        session = await agent.session(session_id)
        assert (await session.run("deploy x2")).completed
        assert again.asked == []  # the stored grant answered
        assert await session.revoke("deploy") == ["deploy"]
        assert await session.grants() == []
        assert (await session.run("deploy x3")).completed
        assert again.asked == ["x3"]  # withdrawn: it asks again


async def test_a_grant_given_in_another_process_applies_at_the_next_turn(tmp_path: Path) -> None:
    asker = Asker("deny")
    async with (
        _agent(ScriptedProvider(_script("y1")), tmp_path, asker) as agent,
        _agent(ScriptedProvider([]), tmp_path) as other,
    ):
        session = await agent.session()
        # The same session as another process sees it: the grant lands in the journal.
        await other.store.add_grant(session.id, "deploy")
        assert (await session.run("deploy y1")).completed
    assert asker.asked == []
