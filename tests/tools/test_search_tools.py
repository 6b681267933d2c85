"""glob and grep: sorted, capped, confined to the working directory."""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path

import pytest

from drover import Agent
from drover.errors import PathEscapeError, ToolError
from drover.testing.scripted import Reply, ScriptedProvider, call
from drover.tools.base import ToolContext
from drover.tools.builtin import search
from drover.tools.builtin.search import glob, grep

from .procs import alive, parent, pids_with


@pytest.fixture
def tree(workdir: Path, tmp_path: Path) -> Path:
    files = {
        "README.md": "# Project\nTODO: write docs\n",
        "src/app.py": "def main():\n    return 'todo later'\n",
        "src/pkg/util.py": "def helper():\n    pass  # TODO tidy\n",
        "src/pkg/data.bin": "",
        ".git/config": "TODO in git\n",
        "notes.txt": "nothing here\n",
    }
    for name, text in files.items():
        path = workdir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (workdir / "src/pkg/data.bin").write_bytes(b"TODO\x00\x01binary")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "leak.py").write_text("TODO secret\n")
    (workdir / "linked").symlink_to(outside, target_is_directory=True)
    (workdir / "leak.py").symlink_to(outside / "leak.py")
    return workdir


def test_both_are_read_only() -> None:
    assert glob.read_only
    assert grep.read_only
    assert grep.input_schema["required"] == ["pattern"]
    assert grep.input_schema["properties"]["path"]["default"] == "."


async def test_glob_recursive_sorted_and_relative(ctx: ToolContext, tree: Path) -> None:
    out = await glob.run({"pattern": "**/*.py"}, ctx)
    assert out.content == "src/app.py\nsrc/pkg/util.py"


async def test_glob_marks_directories_and_skips_git(ctx: ToolContext, tree: Path) -> None:
    out = await glob.run({"pattern": "*"}, ctx)
    assert out.content.splitlines() == ["README.md", "notes.txt", "src/"]
    out = await glob.run({"pattern": ".git/*"}, ctx)
    assert out.content == ".git/config"


async def test_glob_never_lists_outside(ctx: ToolContext, tree: Path) -> None:
    out = await glob.run({"pattern": "linked/*"}, ctx)
    assert out.content == "No paths match 'linked/*'."
    with pytest.raises(PathEscapeError, match=re.escape("uses '..'")):
        await glob.run({"pattern": "../*"}, ctx)
    with pytest.raises(PathEscapeError, match="outside the working directory"):
        await glob.run({"pattern": "/etc/*"}, ctx)


async def test_glob_absolute_pattern_inside(ctx: ToolContext, tree: Path) -> None:
    out = await glob.run({"pattern": f"{tree}/src/*.py"}, ctx)
    assert out.content == "src/app.py"


async def test_glob_no_match_and_empty_pattern(ctx: ToolContext, tree: Path) -> None:
    assert (await glob.run({"pattern": "*.rs"}, ctx)).content == "No paths match '*.rs'."
    with pytest.raises(ToolError, match="pattern must not be empty"):
        await glob.run({"pattern": ""}, ctx)


async def test_glob_is_capped(
    ctx: ToolContext, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(search, "MAX_GLOB_RESULTS", 5)
    for i in range(12):
        (workdir / f"f{i:02d}.txt").write_text("")
    out = await glob.run({"pattern": "*.txt"}, ctx)
    lines = out.content.splitlines()
    assert lines[:5] == [f"f{i:02d}.txt" for i in range(5)]
    assert lines[5] == "[7 more matches not shown (limit 5); use a narrower pattern]"


async def test_grep_lists_path_line_and_text(ctx: ToolContext, tree: Path) -> None:
    out = await grep.run({"pattern": "TODO"}, ctx)
    assert out.content.splitlines() == [
        "README.md:2:TODO: write docs",
        "src/pkg/util.py:2:    pass  # TODO tidy",
    ]


async def test_grep_regex_and_path(ctx: ToolContext, tree: Path) -> None:
    out = await grep.run({"pattern": "(?i)todo", "path": "src"}, ctx)
    assert out.content.splitlines() == [
        "src/app.py:2:    return 'todo later'",
        "src/pkg/util.py:2:    pass  # TODO tidy",
    ]
    out = await grep.run({"pattern": r"^def \w+", "path": "src/app.py"}, ctx)
    assert out.content == "src/app.py:1:def main():"


async def test_grep_no_match(ctx: ToolContext, tree: Path) -> None:
    out = await grep.run({"pattern": "zzz", "path": "src"}, ctx)
    assert out.content == "No matches for 'zzz' in 'src'."
    assert not out.is_error


async def test_grep_errors(ctx: ToolContext, tree: Path) -> None:
    with pytest.raises(ToolError, match=r"invalid regular expression '\(unclosed'"):
        await grep.run({"pattern": "(unclosed"}, ctx)
    with pytest.raises(ToolError, match="path not found: 'missing'"):
        await grep.run({"pattern": "x", "path": "missing"}, ctx)
    for path in ("..", "linked", "leak.py"):
        with pytest.raises(PathEscapeError):
            await grep.run({"pattern": "x", "path": path}, ctx)


async def test_grep_is_capped(
    ctx: ToolContext, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(search, "MAX_GREP_MATCHES", 3)
    (workdir / "many.txt").write_text("hit\n" * 10)
    out = await grep.run({"pattern": "hit"}, ctx)
    assert out.content.splitlines() == [
        "many.txt:1:hit",
        "many.txt:2:hit",
        "many.txt:3:hit",
        "[stopped after 3 matching lines; narrow the pattern or the path to see the rest]",
    ]


async def test_grep_shortens_long_lines(ctx: ToolContext, workdir: Path) -> None:
    (workdir / "min.js").write_text("x" * 2000 + "needle\n")
    out = await grep.run({"pattern": "x"}, ctx)
    assert out.content == "min.js:1:" + "x" * search.MAX_GREP_LINE + " [line shortened]"


async def test_grep_skips_fifos(ctx: ToolContext, workdir: Path) -> None:
    os.mkfifo(workdir / "pipe")
    (workdir / "a.txt").write_text("needle\n")
    out = await grep.run({"pattern": "needle"}, ctx)
    assert out.content == "a.txt:1:needle"


async def test_a_name_that_is_not_utf8_does_not_stop_the_turns_record(tmp_path: Path) -> None:
    """A file system name that is not UTF-8 reaches a tool's output as Python's
    ``surrogateescape`` halves, which no journal can write: the output keeps U+FFFD there, and
    the turn is recorded to its end (it used to stop at that output, "nothing more recorded")."""
    work = tmp_path / "work"
    work.mkdir()
    (work / os.fsdecode(b"bad\xff.txt")).write_text("TODO here\n")
    provider = ScriptedProvider(
        [
            Reply(text="Listing.", calls=[call("glob", pattern="*"), call("grep", pattern="TODO")]),
            Reply(text="Done."),
        ]
    )
    store = tmp_path / "journal.db"
    async with Agent(provider, store=store, workdir=work, permission_mode="allow") as agent:
        result = await agent.run("list")
        calls = await agent.store.tool_calls(session_id=result.session_id)
    assert (result.status, result.text) == ("completed", "Done.")
    assert [c.state for c in calls] == ["output-available", "output-available"]
    for stored in calls:
        assert stored.output is not None and "bad\ufffd.txt" in stored.output
    results = provider.requests[1].messages[-1]
    assert all("bad\ufffd.txt" in r.content for r in results.tool_results)


async def _search_process() -> int:
    """The pid of this process's grep search child, once it runs (a bounded wait)."""
    async with asyncio.timeout(30):
        while True:
            for pid in pids_with(str(search._WORKER)):
                if parent(pid) == os.getpid():
                    return pid
            await asyncio.sleep(0.01)  # the child is not started yet: look again


async def test_a_search_past_its_time_says_so_with_what_it_found(workdir: Path) -> None:
    (workdir / "crafted.txt").write_text("aaaa\n" + "a" * 40 + "!\n")
    _glob, bounded = search.search_tools(grep_seconds=1)
    out = await bounded.run({"pattern": "^(a+)+$"}, ToolContext(workdir=workdir))
    assert out.is_error
    assert out.content.splitlines() == [
        "crafted.txt:1:aaaa",
        "[grep was stopped after 1 s, before it finished: the pattern may backtrack "
        "catastrophically (nested repetition such as '(a+)+' over a long line) or the search "
        "covers too much; simplify the pattern or narrow the path]",
    ]


async def test_a_cancelled_grep_leaves_no_search_process(workdir: Path) -> None:
    (workdir / "crafted.txt").write_text("a" * 40 + "!\n")
    task = asyncio.create_task(grep.run({"pattern": "(a+)+$"}, ToolContext(workdir=workdir)))
    child = await _search_process()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not alive(child)


async def test_grep_names_the_files_too_large_to_search(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(search, "MAX_GREP_FILE_BYTES", 5000)  # past a file's first block
    (workdir / "big.txt").write_text("needle\n" * 1000)
    (workdir / "small.txt").write_text("needle\n")
    out = await grep.run({"pattern": "needle"}, ToolContext(workdir=workdir))
    found, note = out.content.splitlines()
    assert found == "small.txt:1:needle"
    # Its size: apparent or allocated, whichever is larger (blocks depend on the file system).
    assert re.fullmatch(
        r"\[not searched, over the 4\.9 KiB limit: big\.txt \((6\.8|8\.0) KiB\); "
        r"search them with bash \(grep\)\]",
        note,
    )
