"""The REPL's rendering of every event type (drover.cli.tui), its status line and prices,
and its path completion — on a real rich console writing to a string."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from drover.cli.repl.complete import path_completions
from drover.cli.repl.status import (
    TokenAccount,
    load_prices,
    price_of,
    status_text,
)
from drover.cli.tui import TurnView, describe_kept, split_markdown
from drover.core.events import (
    AssistantMessage,
    Compacted,
    Decision,
    Done,
    Error,
    Incomplete,
    PermissionRequest,
    Retry,
    StepStarted,
    TextDelta,
    ThinkingDelta,
    ToolDone,
    ToolProgress,
    ToolResults,
    ToolStart,
    ToolStateChanged,
    TurnStarted,
    UsageReport,
    WorkerEvent,
)
from drover.core.messages import (
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    assistant_message,
    tool_result_message,
    user_message,
)
from drover.errors import ConfigError


class Screen:
    """A TurnView on a console writing to a string: what was printed, and the live area."""

    def __init__(self, workdir: Path, width: int = 80) -> None:
        self.out = io.StringIO()
        self.console = Console(file=self.out, width=width, height=30, color_system=None)
        self.usages: list[Usage] = []
        self.view = TurnView(
            self.console, workdir, status=lambda: "model │ status", on_usage=self.usages.append
        )

    def printed(self) -> str:
        return self.out.getvalue()

    def live(self) -> str:
        probe = Console(file=io.StringIO(), width=80, height=30, color_system=None)
        with probe.capture() as captured:
            probe.print(self.view)
        return captured.get()


def state(call_id: str, index: int, name: str, new: str, **extra: Any) -> ToolStateChanged:
    return ToolStateChanged(call_id=call_id, call_index=index, name=name, state=new, **extra)  # type: ignore[arg-type]


def request(
    tool: str, input: Mapping[str, Any], loop: asyncio.AbstractEventLoop
) -> PermissionRequest:
    future: asyncio.Future[Decision] = loop.create_future()
    return PermissionRequest(
        request_id=f"r-{tool}-{len(input)}",
        call_id="c",
        tool_name=tool,
        input=input,
        summary=f"{tool}: {input.get('path', '')}",
        decision=future,
    )


def test_text_streams_as_markdown_a_paragraph_at_a_time(tmp_path: Path) -> None:
    screen = Screen(tmp_path)
    screen.view.handle(TurnStarted(turn_id="t1", session_id="s", user_message=user_message("q")))
    assert screen.view.turn_id == "t1"
    screen.view.handle(StepStarted(step=1))
    screen.view.handle(TextDelta(text="Some **bold"))
    assert screen.printed() == ""
    assert "Some **bold" in screen.live() or "Some bold" in screen.live()
    screen.view.handle(TextDelta(text="** words.\n\nNext"))
    assert "Some bold words." in screen.printed() and "**" not in screen.printed()
    assert "Next" not in screen.printed() and "Next" in screen.live()
    screen.view.handle(AssistantMessage(message=assistant_message([TextBlock(text="x")])))
    assert "Next" in screen.printed()


def test_a_code_fence_is_never_cut(tmp_path: Path) -> None:
    complete, rest = split_markdown("Intro.\n\n```\nline 1\n\nline 2\n")
    assert complete == "Intro.\n\n" and rest.startswith("```")
    complete, rest = split_markdown("```\na\n\nb\n```\n\nafter")
    assert complete.endswith("```\n\n") and rest == "after"


def test_a_running_call_shows_its_progress_by_its_spinner(tmp_path: Path) -> None:
    screen = Screen(tmp_path)
    view = screen.view
    name = "mcp__everything__long"
    view.handle(state("a", 0, name, "running", input={}))

    def progress(done: float, total: float | None, message: str | None = None) -> ToolProgress:
        return ToolProgress(
            call_id="a", call_index=0, name=name, progress=done, total=total, message=message
        )

    view.handle(progress(2, 5))
    assert "(running 2/5) mcp__everything__long" in screen.live()
    view.handle(progress(3, None, "indexing"))
    assert "(running 3 indexing)" in screen.live()
    worker_call = state("w", 0, name, "running", input={})
    view.handle(WorkerEvent(call_id="t", worker=1, event=worker_call))
    worker = ToolProgress(call_id="w", call_index=0, name=name, progress=1, total=4)
    view.handle(WorkerEvent(call_id="t", worker=1, event=worker))
    assert "(running 1/4) [worker 1]" in screen.live()
    view.handle(state("a", 0, name, "output-available", output="ok"))
    view.handle(progress(5, 5))  # a late report of a finished call changes nothing
    assert "5/5" not in screen.live() + screen.printed()
    assert screen.printed().count("\n") == 1


def test_thinking_retry_partial_and_compaction(tmp_path: Path) -> None:
    screen = Screen(tmp_path)
    screen.view.handle(ThinkingDelta(text="hmm" * 5))
    assert "thinking… (15 characters)" in screen.live()
    screen.view.handle(TextDelta(text="half an ans"))
    screen.view.handle(Retry(attempt=1, delay=0.5, error="overloaded", discard_partial=True))
    assert "retry 1 in 0.5s after: overloaded — the answer restarts below" in screen.printed()
    assert "half an ans" not in screen.live() and "half an ans" not in screen.printed()
    screen.view.handle(TextDelta(text="cut"))
    partial = assistant_message([TextBlock(text="cut", partial=True)])
    screen.view.handle(AssistantMessage(message=partial, partial=True))
    lines = [line.rstrip() for line in screen.printed().splitlines()]
    assert lines[-2:] == ["cut", "(the answer above was cut off here)"]
    screen.view.handle(Compacted(messages_before=40, messages_after=9))
    assert "compacted the history: 40 → 9 messages" in screen.printed()


def test_one_spinner_per_call_matched_by_call_index(tmp_path: Path) -> None:
    screen = Screen(tmp_path)
    view = screen.view
    view.handle(StepStarted(step=1))
    view.handle(state("a", 0, "bash", "input-streaming"))
    view.handle(state("b", 1, "bash", "input-streaming"))
    assert screen.live().count("(writing input)") == 2
    view.handle(state("a", 0, "bash", "running", input={"command": "make"}))
    view.handle(state("b", 1, "bash", "running", input={"command": "pytest"}))
    view.handle(
        ToolStart(
            call_index=1, id="b", name="bash", input_summary="bash: pytest -q", sandbox="workdir"
        )
    )
    live = screen.live()
    assert "(running) bash: make" in live and "(running) bash: pytest -q" in live
    # The second call ends first: its row is final, the first still spins.
    view.handle(state("b", 1, "bash", "output-available", output="5 passed\nmore"))
    view.handle(ToolDone(call_index=1, id="b", name="bash", is_error=False, output_summary="ok"))
    assert "✓ bash: pytest -q  [done] (sandbox workdir)  5 passed…" in screen.printed()
    assert "(running) bash: make" in screen.live() and "pytest" not in screen.live()
    view.handle(state("a", 0, "bash", "output-error", output="exit 2", is_error=True))
    assert "✗ bash: make  [error]  exit 2" in screen.printed()
    assert "running" not in screen.live()
    view.handle(
        ToolResults(message=tool_result_message([ToolResultBlock(tool_use_id="a", content="x")]))
    )
    assert screen.printed().count("\n") == 2  # tool results add nothing on screen


def test_denied_interrupted_and_outcome_unknown_rows(tmp_path: Path) -> None:
    screen = Screen(tmp_path)
    view = screen.view
    view.handle(state("d", 0, "write_file", "input-available", input={"path": "a"}))
    view.handle(state("d", 0, "write_file", "denied", output="The user denied this."))
    view.handle(state("n", 1, "read_file", "interrupted", output="not run"))
    view.handle(state("u", 2, "bash", "running", input={"command": "rm -rf build"}))
    view.handle(
        state("u", 2, "bash", "interrupted", output="cut off", is_error=True, outcome_unknown=True)
    )
    printed = screen.printed()
    assert "⊘ write_file: a  [denied]" in printed
    assert "■ read_file  [interrupted]" in printed
    assert "? bash: rm -rf build  [interrupted, outcome unknown]" in printed


def test_settle_gives_rows_the_journal_state_and_closes_the_rest(tmp_path: Path) -> None:
    screen = Screen(tmp_path)
    view = screen.view
    view.handle(state("a", 0, "bash", "running", input={"command": "sleep 9"}))
    view.handle(state("b", 1, "glob", "input-streaming"))
    view.handle(TextDelta(text="unfinished"))
    view.settle({"a": ("interrupted", True, "Interrupted while running")})
    printed = screen.printed()
    assert "unfinished" in printed
    assert "? bash: sleep 9  [interrupted, outcome unknown]  Interrupted while running" in printed
    assert "■ glob  [interrupted]" in printed
    assert "running" not in screen.live()


async def test_parallel_permission_requests_are_asked_one_at_a_time(tmp_path: Path) -> None:
    loop = asyncio.get_running_loop()
    screen = Screen(tmp_path)
    first = request("write_file", {"path": "one.txt", "content": "1"}, loop)
    second = request("write_file", {"path": "two.txt", "content": "2"}, loop)
    screen.view.handle(first)
    screen.view.handle(second)
    assert screen.view.question is first
    assert "one.txt" in screen.printed() and "two.txt" not in screen.printed()
    assert "Allow write_file: one.txt?" in screen.live()
    assert screen.view.answer("always")
    await asyncio.sleep(0)  # decide() sets the result through the loop
    assert first.decision.result() == "always"
    assert screen.view.question is second and "two.txt" in screen.printed()
    screen.view.answer("deny")
    await asyncio.sleep(0)
    assert second.decision.result() == "deny"
    assert screen.view.question is None and not screen.view.answer("allow")
    assert "write_file: one.txt: allowed always" in screen.printed()
    assert "write_file: two.txt: denied" in screen.printed()


async def test_a_request_withdrawn_before_its_turn_is_skipped(tmp_path: Path) -> None:
    loop = asyncio.get_running_loop()
    screen = Screen(tmp_path)
    first = request("bash", {"command": "ls"}, loop)
    gone = request("write_file", {"path": "gone.txt", "content": ""}, loop)
    screen.view.handle(first)
    screen.view.handle(gone)
    gone.decision.cancel()  # the turn ended that call's wait
    screen.view.answer("allow")
    assert screen.view.question is None and "gone.txt" not in screen.printed()


async def test_file_edits_are_shown_as_diffs_confined_to_the_workdir(tmp_path: Path) -> None:
    loop = asyncio.get_running_loop()
    work = tmp_path / "work"
    work.mkdir()
    (work / "a.py").write_text("x = 1\ny = 2\n")
    (tmp_path / "secret.txt").write_text("TOP SECRET\n")
    screen = Screen(work)
    edit = {"path": "a.py", "old_string": "y = 2", "new_string": "y = 3"}
    screen.view.handle(request("edit_file", edit, loop))
    printed = screen.printed()
    assert "--- a/a.py" in printed and "-y = 2" in printed and "+y = 3" in printed
    assert " x = 1" in printed  # context from the file itself
    screen.view.answer("deny")
    screen.view.handle(request("write_file", {"path": "a.py", "content": "x = 1\n"}, loop))
    assert "-y = 2" in screen.printed().rsplit("asks to run", 1)[1]
    screen.view.answer("deny")
    screen.view.handle(request("write_file", {"path": "new.txt", "content": "a\nb\n"}, loop))
    assert "new file new.txt (2 lines):" in screen.printed()
    screen.view.answer("deny")
    outside = {"path": "../secret.txt", "content": "changed\n"}
    screen.view.handle(request("write_file", outside, loop))
    assert "TOP SECRET" not in screen.printed()
    screen.view.answer("deny")
    screen.view.handle(request("bash", {"command": "make test"}, loop))
    assert "make test" in screen.printed().rsplit("asks to run", 1)[1]


def test_usage_and_terminal_events(tmp_path: Path) -> None:
    screen = Screen(tmp_path)
    usage = Usage(input_tokens=10, output_tokens=5)
    screen.view.handle(UsageReport(usage=usage, total_input=10, total_output=5))
    assert screen.usages == [usage]
    for end in (
        Done(text="a", usage=usage),
        Incomplete(reason="error", error="boom", usage=usage),
        Error(reason="empty_response", error="nothing", usage=usage),
    ):
        screen.view.handle(TextDelta(text="tail"))
        screen.view.handle(end)
        assert screen.view.ended is end and "tail" not in screen.live()
    assert screen.printed().count("tail") == 3
    assert "model │ status" in screen.live()


def test_describe_kept() -> None:
    call = ToolUseBlock(id="c", name="bash", input={})
    pending = (
        user_message("go"),
        assistant_message([TextBlock(text="abc"), call]),
        tool_result_message([ToolResultBlock(tool_use_id="c", content="out")]),
    )
    assert describe_kept(pending) == (
        "kept 3 messages, 3 characters of answer, 1 tool call (1 with results)"
    )
    assert describe_kept(()).startswith("nothing was kept")


def test_prices_status_line_and_user_table(tmp_path: Path) -> None:
    prices = load_prices(tmp_path / "absent.toml")
    assert price_of("anthropic:claude-sonnet-4-5", prices) == (3.0, 15.0)
    assert price_of("openai:gpt-4o-mini-2024", prices) == (0.15, 0.6)  # longest prefix
    assert price_of("anthropic:test", prices) is None
    table = tmp_path / "prices.toml"
    table.write_text('[models]\n"anthropic:test" = { input = 1.0, output = 2.0 }\n')
    prices = load_prices(table)
    account = TokenAccount(prices=prices)
    account.add(Usage(input_tokens=1_000_000, output_tokens=500_000), "anthropic:test")
    assert account.cost_text("anthropic:test") == "$2.0000"
    line = status_text(
        model="anthropic:test",
        account=account,
        context_used=50_000,
        context_limit=200_000,
        session_id="0123456789abcdef",
        sandbox="bubblewrap",
    )
    assert line == (
        "anthropic:test │ 1.50M tokens │ $2.0000 │ ~75% context left │ "
        "session 0123456789ab │ sandbox bubblewrap"
    )
    account.add(Usage(input_tokens=10), "local:unpriced")
    assert account.cost_text("local:unpriced") == "$2.0000+"
    table.write_text('[models]\n"x" = { input = "cheap" }\n')
    with pytest.raises(ConfigError, match="needs numbers 'input' and 'output'"):
        load_prices(table)


def test_path_completion_stays_in_the_workdir(tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / "src").mkdir(parents=True)
    (work / "src" / "main.py").write_text("")
    (work / "setup.cfg").write_text("")
    (work / ".hidden").write_text("")
    (tmp_path / "outside.txt").write_text("")
    assert path_completions(work, "s") == ["setup.cfg", "src/"]
    assert path_completions(work, "src/m") == ["src/main.py"]
    assert path_completions(work, ".h") == [".hidden"]
    assert path_completions(work, "../out") == []
    assert path_completions(work, "/etc/pass") == []


async def test_the_live_area_keeps_one_line_per_call_when_narrow(tmp_path: Path) -> None:
    screen = Screen(tmp_path, width=40)
    long_command = "echo " + "x" * 200
    screen.view.handle(state("a", 0, "bash", "running", input={"command": long_command}))
    screen.view.handle(request("bash", {"command": long_command}, asyncio.get_running_loop()))
    with screen.console.capture() as captured:  # the live area is drawn on the same console
        screen.console.print(screen.view)
    lines = captured.get().splitlines()
    # spinner, question, its keys, status line: each on one line of at most 40 columns
    assert len(lines) == 4 and all(len(line) <= 40 for line in lines)
    assert lines[0].startswith("⠋ (running) bash: echo xxx") and lines[0].endswith("…")


def test_worker_tool_calls_get_their_own_tagged_rows(tmp_path: Path) -> None:
    screen = Screen(tmp_path)
    view = screen.view

    def worker(n: int, event: Any) -> WorkerEvent:
        return WorkerEvent(call_id="task-1", worker=n, event=event)

    view.handle(state("task-1", 0, "task", "running", input={"description": "two jobs"}))
    # The same inner call id in two workers: two rows, never mixed up.
    view.handle(worker(0, state("c", 0, "bash", "running", input={"command": "make a"})))
    view.handle(worker(1, state("c", 100, "bash", "running", input={"command": "make b"})))
    live = screen.live()
    assert "[worker 0] bash: make a" in live and "[worker 1] bash: make b" in live
    view.handle(worker(1, state("c", 100, "bash", "output-available", output="built b")))
    assert "✓ [worker 1] bash: make b  [done]  built b" in screen.printed()
    assert "[worker 0] bash: make a" in screen.live()
    view.handle(worker(1, TextDelta(text="worker prose")))
    view.handle(worker(1, Done(text="b done", usage=Usage())))
    view.handle(worker(0, Incomplete(reason="max_turns", error="limit", usage=Usage())))
    printed = screen.printed()
    assert "[worker 1] finished" in printed and "[worker 0] stopped (max_turns): limit" in printed
    assert "worker prose" not in printed and "worker prose" not in screen.live()
