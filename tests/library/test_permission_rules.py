"""Permission rules in real turns: allow runs without asking, deny refuses in every mode and
tells the model which rule, "always" is a rule, a call nobody could be asked about says so,
and an invalid call goes back to the model before anyone is asked."""

from __future__ import annotations

from pathlib import Path

from drover import Agent, ToolContext, tool
from drover.agent.session import NO_HANDLER_TEXT
from drover.config.settings import Config
from drover.core.events import PermissionRequest
from drover.core.messages import ToolResultBlock
from drover.core.rules import Rule
from drover.testing.scripted import Reply, ScriptedProvider, call
from drover.turn.tool_batch import DENIED_TEXT


def make_tools(ran: list[str]) -> list[object]:
    @tool(name="bash")
    async def bash(ctx: ToolContext, command: str) -> str:
        """Run a command."""
        ran.append(command)
        return f"ran {command}"

    @tool
    async def write_note(ctx: ToolContext, path: str, times: int = 1) -> str:
        """Write a note."""
        ran.append(f"note {path}")
        return "written"

    return [bash, write_note]


def results(provider: ScriptedProvider, index: int) -> list[ToolResultBlock]:
    return list(provider.requests[index].messages[-1].tool_results)


class Asked:
    def __init__(self, answer: str = "allow") -> None:
        self.answer = answer
        self.calls: list[str] = []

    def __call__(self, request: PermissionRequest) -> str:
        self.calls.append(request.summary)
        return self.answer


async def test_allow_runs_without_asking_deny_refuses_and_deny_wins(tmp_path: Path) -> None:
    ran: list[str] = []
    provider = ScriptedProvider(
        [
            Reply(
                calls=[
                    call("bash", command="git status"),
                    call("bash", command="git push --force"),
                    call("write_note", path="src/a.md"),
                    call("write_note", path="docs/b.md"),
                ]
            ),
            Reply(text="done"),
        ]
    )
    asked = Asked()
    config = Config(permissions_deny=(Rule.parse("bash(git push*)", "the config file"),))
    async with Agent(
        provider,
        tools=make_tools(ran),
        store=str(tmp_path / "j.db"),
        workdir=tmp_path,
        config=config,
        allow=["bash(git *)", "write_note(src/**)"],
        on_permission=asked,
    ) as agent:
        result = await agent.run("go")
    assert result.status == "completed"
    # git status: allowed by the rule; git push: the config's deny wins over the allow rule;
    # src/a.md: allowed; docs/b.md: covered by no rule, so asked.
    assert ran == ["git status", "note src/a.md", "note docs/b.md"]
    assert len(asked.calls) == 1 and "docs/b.md" in asked.calls[0]
    refused = results(provider, 1)[1]
    assert refused.is_error
    assert refused.content == (
        'Not run: the deny rule "bash(git push*)" (the config file) refuses this call.'
    )


async def test_a_deny_rule_refuses_in_allow_mode_even_a_read_only_tool(tmp_path: Path) -> None:
    read: list[str] = []

    @tool(read_only=True)
    async def read_file(ctx: ToolContext, path: str) -> str:
        """Read a file."""
        read.append(path)
        return "contents"

    calls = [call("read_file", path="config/.env"), call("read_file", path="a.txt")]
    provider = ScriptedProvider([Reply(calls=calls), Reply(text="ok")])
    async with Agent(
        provider,
        tools=[read_file],
        store=":memory:",
        workdir=tmp_path,
        permission_mode="allow",
        deny=["read_file(.env)"],
    ) as agent:
        await agent.run("read")
    assert read == ["a.txt"]
    assert results(provider, 1)[0].content == (
        'Not run: the deny rule "read_file(.env)" (deny=) refuses this call.'
    )


async def test_always_on_bash_grants_that_command_only_and_is_kept(tmp_path: Path) -> None:
    ran: list[str] = []
    provider = ScriptedProvider(
        [
            Reply(calls=[call("bash", command="npm test")]),
            Reply(calls=[call("bash", command="npm test"), call("bash", command="rm -rf x")]),
            Reply(text="done"),
        ]
    )
    asked = Asked("always")
    async with Agent(
        provider,
        tools=make_tools(ran),
        store=str(tmp_path / "j.db"),
        workdir=tmp_path,
        on_permission=asked,
    ) as agent:
        result = await agent.run("test")
        session = await agent.session(result.session_id)
        grants = [g.rule for g in await session.grants()]
    # The first "npm test" was asked about; the second ran on the grant; "rm -rf x" asked.
    assert len(asked.calls) == 2
    assert ran == ["npm test", "npm test", "rm -rf x"]
    assert grants == ["bash(npm test)", "bash(rm -rf x)"]


async def test_a_call_nobody_could_be_asked_about_says_so(tmp_path: Path) -> None:
    provider = ScriptedProvider([Reply(calls=[call("bash", command="ls")]), Reply(text="ok")])
    async with Agent(provider, tools=make_tools([]), store=":memory:", workdir=tmp_path) as agent:
        await agent.run("list")  # no on_permission: nobody to ask
    told = results(provider, 1)[0].content
    assert told == NO_HANDLER_TEXT and "by user" not in told

    provider = ScriptedProvider([Reply(calls=[call("bash", command="ls")]), Reply(text="ok")])
    async with Agent(
        provider,
        tools=make_tools([]),
        store=":memory:",
        workdir=tmp_path,
        on_permission=Asked("deny"),
    ) as agent:
        await agent.run("list")
    assert results(provider, 1)[0].content == DENIED_TEXT


async def test_an_invalid_call_goes_back_without_asking(tmp_path: Path) -> None:
    ran: list[str] = []
    provider = ScriptedProvider(
        [Reply(calls=[call("write_note", path="a", times="three")]), Reply(text="ok")]
    )
    asked = Asked()
    async with Agent(
        provider, tools=make_tools(ran), store=":memory:", workdir=tmp_path, on_permission=asked
    ) as agent:
        await agent.run("note")
    assert asked.calls == [] and ran == []
    told = results(provider, 1)[0]
    assert told.is_error and "invalid input for tool 'write_note'" in told.content
