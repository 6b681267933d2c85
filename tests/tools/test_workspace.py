"""Working-directory confinement and the output cap."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drover.errors import PathEscapeError, ToolError
from drover.tools.workspace import (
    MAX_OUTPUT_CHARS,
    OutputBuffer,
    cap_output,
    display_path,
    resolve_in_workdir,
)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    other = tmp_path / "outside"
    other.mkdir()
    (other / "secret.txt").write_text("secret")
    return other.resolve()


def test_relative_paths_resolve_inside(workdir: Path) -> None:
    assert resolve_in_workdir(workdir, "a/b.txt") == workdir / "a" / "b.txt"
    assert resolve_in_workdir(workdir, ".") == workdir
    assert resolve_in_workdir(workdir, "a/../b") == workdir / "b"


def test_absolute_paths_inside_are_allowed(workdir: Path) -> None:
    assert resolve_in_workdir(workdir, str(workdir / "x")) == workdir / "x"


def test_dotdot_escape_is_refused(workdir: Path) -> None:
    with pytest.raises(PathEscapeError) as raised:
        resolve_in_workdir(workdir, "../x")
    assert str(raised.value) == f"path '../x' is outside the working directory {workdir}"
    with pytest.raises(PathEscapeError):
        resolve_in_workdir(workdir, "a/../../x")


def test_absolute_path_outside_is_refused(workdir: Path, outside: Path) -> None:
    with pytest.raises(PathEscapeError, match="is outside the working directory"):
        resolve_in_workdir(workdir, str(outside / "secret.txt"))
    with pytest.raises(PathEscapeError):
        resolve_in_workdir(workdir, "/etc/passwd")


def test_prefix_sibling_is_not_inside(workdir: Path) -> None:
    sibling = workdir.parent / (workdir.name + "2")
    sibling.mkdir()
    with pytest.raises(PathEscapeError):
        resolve_in_workdir(workdir, str(sibling / "f"))


def test_symlinked_file_to_outside_is_refused(workdir: Path, outside: Path) -> None:
    (workdir / "link").symlink_to(outside / "secret.txt")
    with pytest.raises(PathEscapeError):
        resolve_in_workdir(workdir, "link")


def test_symlinked_directory_to_outside_is_refused(workdir: Path, outside: Path) -> None:
    (workdir / "dir").symlink_to(outside, target_is_directory=True)
    with pytest.raises(PathEscapeError):
        resolve_in_workdir(workdir, "dir/secret.txt")
    with pytest.raises(PathEscapeError):
        resolve_in_workdir(workdir, "dir/not-yet/created.txt")


def test_dangling_symlink_to_outside_is_refused(workdir: Path, outside: Path) -> None:
    (workdir / "new").symlink_to(outside / "does-not-exist")
    with pytest.raises(PathEscapeError):
        resolve_in_workdir(workdir, "new")


def test_symlink_inside_is_allowed(workdir: Path) -> None:
    (workdir / "real").mkdir()
    (workdir / "real" / "f.txt").write_text("x")
    (workdir / "alias").symlink_to(workdir / "real", target_is_directory=True)
    (workdir / "flink").symlink_to("real/f.txt")
    assert resolve_in_workdir(workdir, "alias/f.txt") == workdir / "real" / "f.txt"
    assert resolve_in_workdir(workdir, "flink") == workdir / "real" / "f.txt"


def test_unresolved_workdir_is_resolved(tmp_path: Path, workdir: Path) -> None:
    alias = tmp_path / "alias"
    alias.symlink_to(workdir, target_is_directory=True)
    assert resolve_in_workdir(alias, "x") == workdir / "x"
    assert resolve_in_workdir(alias, str(alias / "x")) == workdir / "x"


def test_unusable_paths_are_tool_errors(workdir: Path) -> None:
    with pytest.raises(ToolError, match="must not be empty"):
        resolve_in_workdir(workdir, "")
    with pytest.raises(ToolError, match="NUL"):
        resolve_in_workdir(workdir, "a\x00b")


@given(st.lists(st.sampled_from(["..", ".", "a", "b", "/", "c/.."]), max_size=8))
def test_resolved_paths_never_leave_the_workdir(parts: list[str]) -> None:
    root = Path("/nonexistent-drover-root/w")
    try:
        resolved = resolve_in_workdir(root, "/".join(parts) or ".")
    except PathEscapeError:
        return
    assert resolved.is_relative_to(root)


def test_display_path(workdir: Path) -> None:
    assert display_path(workdir, workdir / "a" / "b.txt") == "a/b.txt"
    assert display_path(workdir, workdir) == "."
    assert display_path(workdir, Path("/elsewhere/x")) == "/elsewhere/x"


def test_short_output_is_untouched() -> None:
    out = cap_output("hello\n")
    assert (out.content, out.truncated, out.is_error) == ("hello\n", False, False)
    assert cap_output("x" * MAX_OUTPUT_CHARS).truncated is False


def test_long_output_keeps_head_and_tail_and_says_what_was_cut() -> None:
    text = "".join(f"line {i:05d}\n" for i in range(10_000))  # 110,000 characters
    out = cap_output(text, is_error=True)
    assert out.truncated
    assert out.is_error
    assert out.content.startswith("line 00000\nline 00001\n")
    assert out.content.endswith("line 09998\nline 09999\n")
    note = re.search(
        r"\[\.\.\. ([\d,]+) characters cut: output exceeded 30,000 characters \.\.\.\]", out.content
    )
    assert note is not None
    cut = int(note.group(1).replace(",", ""))
    kept = out.content.replace(note.group(0), "")
    # Every original character is either kept or counted as cut (plus the note's line breaks).
    assert len(kept) - 2 <= len(text) - cut <= len(kept)
    assert len(out.content) < MAX_OUTPUT_CHARS + 100


def test_cap_without_line_breaks() -> None:
    out = cap_output("a" * 50 + "b" * 50, limit=20)
    assert (
        out.content
        == "a" * 10 + "\n[... 80 characters cut: output exceeded 20 characters ...]\n" + "b" * 10
    )


@given(st.lists(st.text(max_size=60), max_size=40), st.integers(min_value=10, max_value=200))
def test_output_buffer_matches_cap_when_nothing_is_dropped(chunks: list[str], limit: int) -> None:
    buffer = OutputBuffer(limit)
    for chunk in chunks:
        buffer.append(chunk)
    text = "".join(chunks)
    assert buffer.total_chars == len(text)
    capped, truncated = buffer.text()
    if len(text) <= 2 * limit:
        expected = cap_output(text, limit=limit)
        assert (capped, truncated) == (expected.content, expected.truncated)
    else:
        assert truncated
        note = re.search(r"\[\.\.\. ([\d,]+) characters cut: [^\]]*\]", capped)
        assert note is not None
        cut = int(note.group(1).replace(",", ""))
        shown = len(capped) - len(note.group(0))
        # Every character is shown or counted as cut; the note adds one or two line breaks.
        assert shown - 2 <= len(text) - cut <= shown - 1
        assert capped.startswith(text[: limit // 2 - limit // 10])
        assert capped.endswith(text[-(limit - limit // 2 - limit // 10) :])


def test_output_buffer_bounds_memory() -> None:
    buffer = OutputBuffer(100)
    for i in range(10_000):
        buffer.append(f"{i:09d}\n")
    capped, truncated = buffer.text()
    assert truncated
    assert capped.startswith("000000000\n")
    assert capped.endswith("000009999\n")
    assert "characters cut: output exceeded 100 characters" in capped
    assert buffer.total_chars == 100_000
    assert len(capped) < 200


def test_workdir_fixture_is_clean(workdir: Path) -> None:
    assert os.listdir(workdir) == []
