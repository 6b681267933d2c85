"""A tool's progress reports: transient events that reach a consumer of the run, with their
message as UTF-8 can hold it (a file name that is not UTF-8 arrives from the file system with
half a surrogate pair in it, which no consumer could encode)."""

from __future__ import annotations

from pathlib import Path

from drover import Agent, ToolContext, ToolProgress, tool
from drover.config.settings import Config
from drover.testing.scripted import Reply, ScriptedProvider, call

#: ``os.fsdecode(b"caf\xe9.txt")`` on a UTF-8 system: the byte kept as a lone surrogate.
NOT_UTF8 = "caf\udce9.txt"


@tool(read_only=True)
async def copy_file(ctx: ToolContext) -> str:
    """Copy a file, telling how far it got."""
    await ctx.on_progress(1, 2, f"copying {NOT_UTF8}")
    await ctx.on_progress(2, 2, None)
    return f"copied {NOT_UTF8}"


async def test_a_progress_message_reaches_the_consumer_as_text_utf8_can_hold(
    tmp_path: Path,
) -> None:
    provider = ScriptedProvider([Reply(calls=[call("copy_file")]), Reply(text="Copied.")])
    agent = Agent(
        provider,
        tools=[copy_file],  # type: ignore[list-item]
        store=str(tmp_path / "journal.db"),
        workdir=tmp_path,
        config=Config(),
    )
    progress: list[ToolProgress] = []
    async with agent:
        async with agent.run_stream("copy it") as stream:
            async for event in stream:
                if isinstance(event, ToolProgress):
                    progress.append(event)
        assert stream.result.status == "completed"
    assert [(p.progress, p.total, p.message) for p in progress] == [
        (1, 2, "copying caf\ufffd.txt"),
        (2, 2, None),
    ]
    # The output is mended the same way before the model sees it.
    (result,) = provider.requests[1].messages[-1].tool_results
    assert result.content == "copied caf\ufffd.txt"
