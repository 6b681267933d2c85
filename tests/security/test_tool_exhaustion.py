"""drover's own process against its tools: a regex that backtracks for minutes, a sparse file
of 10 GiB. A prompt-injected model calls the tools through real turns (the library, the
scripted provider); what must hold is that the process keeps serving other turns and stays
small.

The sparse file's attack runs in a child Python with its address space capped (2 GiB): code
that reads the file whole fails there with a MemoryError instead of taking this machine's
memory, and the child reports its peak resident size (``VmHWM``) for the bound.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from drover import Agent
from drover.config.settings import Config
from drover.core.events import ToolStart
from drover.testing.scripted import Reply, ScriptedProvider, call
from drover.tools.base import Tool, ToolContext, ToolOutput
from drover.tools.builtin import search, search_tools

#: A line that takes Python's re many seconds with (a+)+$ (it doubles with every 'a'). One
#: line: between two, the old code let the loop breathe.
CRAFTED = "a" * 28 + "!\n"
#: A failure bound, never a pace.
BOUND = 120


class Noted:
    """The real ``grep``, noting in ``order`` the moment it returns (in the same step of the
    event loop: nothing else runs between its end and the note)."""

    def __init__(self, tool: Tool, order: list[str]) -> None:
        self.tool, self.order = tool, order
        self.name, self.description = tool.name, tool.description
        self.input_schema, self.read_only = tool.input_schema, tool.read_only

    async def run(self, args: dict[str, object], ctx: ToolContext) -> ToolOutput:
        try:
            return await self.tool.run(args, ctx)
        finally:
            self.order.append("grep ended")


async def test_a_catastrophic_grep_stops_with_a_clear_error_while_other_turns_flow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(search, "GREP_SECONDS", 3.0, raising=False)
    work = tmp_path / "work"
    work.mkdir()
    (work / "crafted.txt").write_text(CRAFTED)
    provider = ScriptedProvider(
        [
            Reply(calls=[call("grep", pattern="(a+)+$")]),  # session A's first request
            Reply(text="pong"),  # session B's, made while A's grep runs
            Reply(text="done"),  # session A's second
        ]
    )
    order: list[str] = []
    grep = Noted(search_tools()[1], order)
    async with Agent(
        provider,
        tools=[grep],  # type: ignore[list-item]
        store=str(tmp_path / "journal.db"),
        workdir=work,
        config=Config(),
        sandbox="off",
    ) as agent:
        first, second = await agent.session(), await agent.session()
        grep_started = asyncio.Event()

        async def searching() -> str:
            async with first.run_stream("search the logs") as stream:
                async for event in stream:
                    if isinstance(event, ToolStart):
                        grep_started.set()
            return stream.result.status

        async with asyncio.timeout(BOUND):
            task = asyncio.create_task(searching())
            await grep_started.wait()
            other = await second.run("ping")  # another turn, on the same event loop
            order.append("other turn ended")
            status = await task
    assert (other.status, other.text) == ("completed", "pong")
    # While grep searched, the loop served the other turn: it ended first. (Python's re in
    # drover's process held the GIL: nothing moved until the search was over.)
    assert order == ["other turn ended", "grep ended"]
    assert status == "completed"
    [result] = provider.requests[2].messages[-1].tool_results
    assert result.is_error
    assert result.content.startswith("[grep was stopped after 3 s, before it finished")


SPARSE_ATTACK = textwrap.dedent(
    """
    import asyncio, json, resource, sys
    from pathlib import Path

    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
    from drover import Agent
    from drover.config.settings import Config
    from drover.testing.scripted import Reply, ScriptedProvider, call

    work = Path(sys.argv[1])
    calls = [
        call("grep", pattern="needle"),
        call("grep", pattern="needle", path="big.log"),
        call("grep", pattern="no such text", path="big.log"),  # on into the hole
        call("read_file", path="big.log"),
        call("edit_file", path="big.log", old_string="needle", new_string="pin"),
        call("write_file", path="big.log", content="small now\\n"),
    ]

    async def main():
        provider = ScriptedProvider([Reply(calls=calls), Reply(text="done")])
        async with Agent(
            provider, store=sys.argv[2], workdir=work, config=Config(), sandbox="off",
            permission_mode="allow",
        ) as agent:
            result = await agent.run("look at the log")
        told = [r.content for r in provider.requests[1].messages[-1].tool_results]
        return result.status, told

    status, told = asyncio.run(main())
    with open("/proc/self/status") as f:
        peak = next(int(l.split()[1]) for l in f if l.startswith("VmHWM:"))
    print(json.dumps({"status": status, "told": told, "peak_kib": peak}))
    """
)


def test_a_sparse_file_of_10_gib_is_refused_or_capped_in_bounded_memory(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    big = work / "big.log"
    with big.open("wb") as handle:
        # Text first, past grep's binary sniff, then a hole that reads as 10 GiB of zeros.
        handle.write(b"a needle in the log\n" * 1000)
        handle.truncate(10 << 30)
    (work / "small.txt").write_text("a needle here\n")
    done = subprocess.run(
        [sys.executable, "-c", SPARSE_ATTACK, str(work), str(tmp_path / "journal.db")],
        capture_output=True,
        text=True,
        timeout=BOUND,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["status"] == "completed"
    search_all, search_big, search_hole, read, edit, write = report["told"]
    assert search_all.splitlines() == [
        "small.txt:1:a needle here",
        "[not searched, over the 10.0 MiB limit: big.log (10.0 GiB); search them with bash (grep)]",
    ]
    assert "big.log (10.0 GiB)" in search_big and "big.log (10.0 GiB)" in search_hole
    assert "too large to read whole (10,737,418,240 bytes" in read
    assert "too large to read whole" in edit
    assert "was not replaced" in write
    assert big.stat().st_size == 10 << 30  # not replaced
    # Generously bounded: an interpreter with drover loaded is ~100 MiB; reading the file
    # would be 10 GiB.
    assert report["peak_kib"] < 400 * 1024, report["peak_kib"]
