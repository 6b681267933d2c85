"""read_file, write_file and edit_file in a temporary working directory."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from drover.errors import PathEscapeError, ToolError
from drover.tools.base import ToolContext
from drover.tools.builtin.files import MAX_READ_BYTES, edit_file, read_file, write_file


def test_read_only_flags() -> None:
    assert read_file.read_only
    assert not write_file.read_only
    assert not edit_file.read_only
    assert read_file.input_schema["required"] == ["path"]
    assert write_file.input_schema["required"] == ["path", "content"]
    assert edit_file.input_schema["required"] == ["path", "old_string", "new_string"]


async def test_read_returns_content_as_is(ctx: ToolContext, workdir: Path) -> None:
    (workdir / "a.txt").write_bytes("première\r\nline two\n\n".encode())
    out = await read_file.run({"path": "a.txt"}, ctx)
    assert out.content == "première\r\nline two\n\n"
    assert not out.is_error
    assert not out.truncated


async def test_read_missing_file(ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match=re.escape("file not found: 'nope.txt'")):
        await read_file.run({"path": "nope.txt"}, ctx)


async def test_read_directory_hints_at_glob(ctx: ToolContext, workdir: Path) -> None:
    (workdir / "src").mkdir()
    with pytest.raises(ToolError, match=r"'src' is a directory.*glob \(pattern 'src/\*'\)"):
        await read_file.run({"path": "src"}, ctx)


async def test_read_binary_is_refused(ctx: ToolContext, workdir: Path) -> None:
    (workdir / "img.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    with pytest.raises(ToolError, match=re.escape("'img.png' is a binary file")):
        await read_file.run({"path": "img.png"}, ctx)
    (workdir / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    with pytest.raises(ToolError, match=re.escape("'latin1.txt' is not UTF-8 text")):
        await read_file.run({"path": "latin1.txt"}, ctx)


async def test_read_huge_file_is_refused(ctx: ToolContext, workdir: Path) -> None:
    with (workdir / "big.log").open("wb") as f:
        f.truncate(MAX_READ_BYTES + 1)
    with pytest.raises(ToolError, match="too large to read whole"):
        await read_file.run({"path": "big.log"}, ctx)


async def test_read_long_file_is_capped(ctx: ToolContext, workdir: Path) -> None:
    (workdir / "long.txt").write_text("".join(f"{i}\n" for i in range(20_000)))
    out = await read_file.run({"path": "long.txt"}, ctx)
    assert out.truncated
    assert "characters cut" in out.content
    assert out.content.startswith("0\n1\n")
    assert out.content.endswith("19999\n")


async def test_read_outside_is_refused(ctx: ToolContext, tmp_path: Path, workdir: Path) -> None:
    (tmp_path / "secret.txt").write_text("secret")
    (workdir / "link").symlink_to(tmp_path / "secret.txt")
    for path in ("../secret.txt", str(tmp_path / "secret.txt"), "link"):
        with pytest.raises(PathEscapeError, match="outside the working directory"):
            await read_file.run({"path": path}, ctx)


async def test_write_creates_parents_and_reports_bytes(ctx: ToolContext, workdir: Path) -> None:
    out = await write_file.run({"path": "deep/er/n.txt", "content": "héllo\n"}, ctx)
    assert out.content == "Created deep/er/n.txt (7 bytes written)."
    assert (workdir / "deep" / "er" / "n.txt").read_bytes() == "héllo\n".encode()
    out = await write_file.run({"path": "deep/er/n.txt", "content": ""}, ctx)
    assert out.content == "Overwrote deep/er/n.txt (0 bytes written)."
    assert (workdir / "deep" / "er" / "n.txt").read_text() == ""


async def test_write_to_a_directory_is_refused(ctx: ToolContext, workdir: Path) -> None:
    (workdir / "d").mkdir()
    with pytest.raises(ToolError, match="'d' is a directory"):
        await write_file.run({"path": "d", "content": "x"}, ctx)


async def test_write_outside_is_refused(ctx: ToolContext, tmp_path: Path, workdir: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (workdir / "out").symlink_to(outside, target_is_directory=True)
    (workdir / "dangling").symlink_to(outside / "new.txt")
    for path in ("../x.txt", "out/new/x.txt", "dangling", "/tmp/drover-should-not-exist"):
        with pytest.raises(PathEscapeError):
            await write_file.run({"path": path, "content": "x"}, ctx)
    assert list(outside.iterdir()) == []
    assert not (tmp_path / "x.txt").exists()


async def test_write_through_symlink_inside_keeps_the_link(ctx: ToolContext, workdir: Path) -> None:
    (workdir / "real.txt").write_text("old")
    (workdir / "alias.txt").symlink_to("real.txt")
    out = await write_file.run({"path": "alias.txt", "content": "new"}, ctx)
    assert out.content == "Overwrote real.txt (3 bytes written)."
    assert (workdir / "alias.txt").is_symlink()
    assert (workdir / "real.txt").read_text() == "new"


async def test_edit_replaces_the_single_occurrence(ctx: ToolContext, workdir: Path) -> None:
    (workdir / "m.py").write_text("def f():\n    return 1\n\ndef g():\n    return 2\n")
    out = await edit_file.run(
        {"path": "m.py", "old_string": "    return 1\n", "new_string": "    x = 1\n    return x\n"},
        ctx,
    )
    assert out.content == "Edited m.py: replaced 2 line(s) with 3 line(s)."
    assert (workdir / "m.py").read_text() == (
        "def f():\n    x = 1\n    return x\n\ndef g():\n    return 2\n"
    )


async def test_edit_can_delete(ctx: ToolContext, workdir: Path) -> None:
    (workdir / "t.txt").write_text("keep drop keep")
    await edit_file.run({"path": "t.txt", "old_string": " drop", "new_string": ""}, ctx)
    assert (workdir / "t.txt").read_text() == "keep keep"


async def test_edit_not_found_says_zero(ctx: ToolContext, workdir: Path) -> None:
    (workdir / "t.txt").write_text("abc")
    with pytest.raises(ToolError, match=r"old_string was not found in 't.txt' \(0 occurrences\)"):
        await edit_file.run({"path": "t.txt", "old_string": "xyz", "new_string": "q"}, ctx)
    assert (workdir / "t.txt").read_text() == "abc"


async def test_edit_ambiguous_says_how_many(ctx: ToolContext, workdir: Path) -> None:
    (workdir / "t.txt").write_text("x = 1\nx = 1\nx = 1\n")
    with pytest.raises(
        ToolError,
        match=re.escape("old_string occurs 3 times in 't.txt'; it must occur exactly once"),
    ):
        await edit_file.run({"path": "t.txt", "old_string": "x = 1", "new_string": "y"}, ctx)
    assert (workdir / "t.txt").read_text() == "x = 1\nx = 1\nx = 1\n"


async def test_edit_refuses_empty_and_identical_strings(ctx: ToolContext, workdir: Path) -> None:
    (workdir / "t.txt").write_text("abc")
    with pytest.raises(ToolError, match="old_string must not be empty"):
        await edit_file.run({"path": "t.txt", "old_string": "", "new_string": "q"}, ctx)
    with pytest.raises(ToolError, match="identical"):
        await edit_file.run({"path": "t.txt", "old_string": "a", "new_string": "a"}, ctx)


async def test_edit_missing_file_and_escape(ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match="file not found"):
        await edit_file.run({"path": "no.txt", "old_string": "a", "new_string": "b"}, ctx)
    with pytest.raises(PathEscapeError):
        await edit_file.run({"path": "../no.txt", "old_string": "a", "new_string": "b"}, ctx)


async def test_missing_arguments_are_tool_errors(ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match="content: Field required"):
        await write_file.run({"path": "x"}, ctx)
