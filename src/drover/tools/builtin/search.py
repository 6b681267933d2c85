"""The search tools: ``glob {pattern}`` lists files, ``grep {pattern, path?}`` searches their text.

Both are read-only, confined to the working directory (a symlink leading outside is neither
listed nor read), blind to the hidden paths of the sandbox's
:class:`~drover.tools.workspace.PathRules` (neither listed nor searched, nor reached through a
symlink), sorted for stable output, and capped. The directory walk runs in a worker
thread that stops early when the call is cancelled.
"""

from __future__ import annotations

import asyncio
import os
import re
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath
from typing import TypeVar

from drover.errors import PathEscapeError, ToolError
from drover.tools.base import Tool, ToolContext, ToolOutput
from drover.tools.decorator import tool
from drover.tools.workspace import PathRules, cap_output, display_path, resolve_in_workdir

#: At most this many paths are listed by one glob call.
MAX_GLOB_RESULTS = 1_000
#: At most this many matching lines are reported by one grep call.
MAX_GREP_MATCHES = 500
#: A matching line longer than this is shortened in grep output (minified files).
MAX_GREP_LINE = 500
#: Directories grep never descends into.
SKIPPED_DIRS = frozenset({".git", ".hg", ".svn"})
_BINARY_SNIFF = 8_192

_T = TypeVar("_T")


async def _in_thread(work: Callable[[threading.Event], _T]) -> _T:
    """Run blocking ``work`` in a thread; on cancellation tell it to stop (via the event)."""
    stop = threading.Event()
    try:
        return await asyncio.to_thread(work, stop)
    finally:
        stop.set()


def _inside(root: Path, path: Path) -> bool:
    try:
        return path.resolve().is_relative_to(root)
    except (OSError, RuntimeError):
        return False


def _hidden(path: Path, hidden: list[Path]) -> bool:
    """Whether ``path``, or where it leads, is or lies below a hidden path."""
    if not hidden:
        return False
    try:
        candidates = (path, path.resolve())
    except (OSError, RuntimeError):
        return True
    return any(c == h or c.is_relative_to(h) for c in candidates for h in hidden)


# -- glob --------------------------------------------------------------------------------------


def _glob_pattern(root: Path, pattern: str) -> str:
    """The pattern relative to ``root``; refuses ``..`` and absolute paths outside it."""
    if not pattern:
        raise ToolError("pattern must not be empty, e.g. '**/*.py'")
    if "\x00" in pattern:
        raise ToolError("pattern contains a NUL byte")
    posix = PurePosixPath(pattern)
    if posix.is_absolute():
        try:
            posix = posix.relative_to(root.as_posix())
        except ValueError:
            raise PathEscapeError(
                f"pattern {pattern!r} is outside the working directory {root}"
            ) from None
    if ".." in posix.parts:
        raise PathEscapeError(
            f"pattern {pattern!r} uses '..'; glob only lists inside the working directory {root}"
        )
    relative = posix.as_posix()
    return relative if relative != "." else "*"


def _glob(
    root: Path, pattern: str, hidden: list[Path], stop: threading.Event
) -> tuple[list[str], int]:
    """Sorted matches (directories end in '/') and how many there were in all."""
    wants_vcs = any(part in SKIPPED_DIRS for part in PurePosixPath(pattern).parts)
    # Matches share parents; resolving each parent once keeps large trees cheap.
    parents: dict[Path, bool] = {}

    def inside(match: Path) -> bool:
        parent_ok = parents.get(match.parent)
        if parent_ok is None:
            parent_ok = parents[match.parent] = _inside(root, match.parent)
        return parent_ok and (not match.is_symlink() or _inside(root, match))

    found: list[str] = []
    for match in root.glob(pattern):
        if stop.is_set():
            break
        relative = match.relative_to(root)
        if not wants_vcs and SKIPPED_DIRS.intersection(relative.parts):
            continue
        if not inside(match) or _hidden(match, hidden):
            continue
        shown = relative.as_posix()
        if shown == ".":
            continue
        found.append(shown + "/" if match.is_dir() else shown)
    found.sort()
    return found[:MAX_GLOB_RESULTS], len(found)


# -- grep --------------------------------------------------------------------------------------


def _files_under(
    root: Path, start: Path, hidden: list[Path], stop: threading.Event
) -> Iterator[Path]:
    """Regular files under ``start`` in sorted order, skipping VCS directories, hidden paths
    and escapes."""
    if not start.is_dir():
        yield start
        return
    for directory, dirnames, filenames in os.walk(start):
        if stop.is_set():
            return
        dirnames[:] = sorted(
            d for d in dirnames if d not in SKIPPED_DIRS and not _hidden(Path(directory, d), hidden)
        )
        for name in sorted(filenames):
            path = Path(directory, name)
            if path.is_symlink() and not _inside(root, path):
                continue
            if _hidden(path, hidden):
                continue
            yield path


def _grep_file(path: Path, regex: re.Pattern[str], shown: str, out: list[str], limit: int) -> None:
    try:
        if not stat.S_ISREG(path.stat().st_mode):
            return  # a FIFO or device would block or never end
        with path.open("rb") as handle:
            if b"\x00" in handle.read(_BINARY_SNIFF):
                return
            handle.seek(0)
            for lineno, raw in enumerate(handle, 1):
                line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                if regex.search(line):
                    if len(line) > MAX_GREP_LINE:
                        line = line[:MAX_GREP_LINE] + " [line shortened]"
                    out.append(f"{shown}:{lineno}:{line}")
                    if len(out) >= limit:
                        return
    except OSError:
        return  # unreadable files are skipped like binary ones


def _grep(
    root: Path, start: Path, regex: re.Pattern[str], hidden: list[Path], stop: threading.Event
) -> list[str]:
    """Up to ``MAX_GREP_MATCHES + 1`` matching lines (one extra to tell the cap was hit)."""
    out: list[str] = []
    for path in _files_under(root, start, hidden, stop):
        if stop.is_set() or len(out) > MAX_GREP_MATCHES:
            break
        _grep_file(path, regex, display_path(root, path), out, MAX_GREP_MATCHES + 1)
    return out


# -- the tools ---------------------------------------------------------------------------------


def search_tools(rules: PathRules | None = None) -> tuple[Tool, Tool]:
    """``glob`` and ``grep`` under ``rules`` (None: the default rules, computed at each call)."""
    current: Callable[[], PathRules] = (lambda: rules) if rules is not None else PathRules.default

    @tool(read_only=True)
    async def glob(ctx: ToolContext, pattern: str) -> ToolOutput:
        """List files and directories in the working directory whose paths match a glob pattern
        (e.g. '*.md', 'src/**/*.py'; '**' matches any number of directories). Results are
        relative to the working directory, sorted, and directories end in '/'.

        Args:
            pattern: The glob pattern, relative to the working directory.
        """
        root = ctx.workdir.resolve()
        relative = _glob_pattern(root, pattern)
        try:
            shown, total = await _in_thread(
                lambda stop: _glob(root, relative, current().hidden_in(root), stop)
            )
        except ValueError as exc:  # pathlib's verdict on a malformed pattern
            raise ToolError(f"invalid glob pattern {pattern!r}: {exc}") from None
        if not shown:
            return ToolOutput(content=f"No paths match {pattern!r}.")
        text = "\n".join(shown)
        if total > len(shown):
            text += (
                f"\n[{total - len(shown):,} more matches not shown (limit {MAX_GLOB_RESULTS:,}); "
                "use a narrower pattern]"
            )
        return cap_output(text)

    @tool(read_only=True)
    async def grep(ctx: ToolContext, pattern: str, path: str = ".") -> ToolOutput:
        """Search the text files under a path for lines matching a Python regular expression and
        list them as 'path:line_number:line'. Binary files and .git directories are skipped.

        Args:
            pattern: A Python regular expression, e.g. 'def \\w+_test' or '(?i)todo'.
            path: A file or directory to search, relative to the working directory (default: all).
        """
        try:
            regex = re.compile(pattern)
        except re.error as exc:
            raise ToolError(f"invalid regular expression {pattern!r}: {exc}") from None
        root = ctx.workdir.resolve()
        start = resolve_in_workdir(root, path)
        rules = current()
        rules.check(root, path, start, write=False)
        if not start.exists():
            raise ToolError(f"path not found: '{display_path(root, start)}'")
        hidden = rules.hidden_in(root)
        matches = await _in_thread(lambda stop: _grep(root, start, regex, hidden, stop))
        if not matches:
            return ToolOutput(
                content=f"No matches for {pattern!r} in '{display_path(root, start)}'."
            )
        text = "\n".join(matches[:MAX_GREP_MATCHES])
        if len(matches) > MAX_GREP_MATCHES:
            text += (
                f"\n[stopped after {MAX_GREP_MATCHES:,} matching lines; "
                "narrow the pattern or the path to see the rest]"
            )
        return cap_output(text)

    return glob, grep


glob, grep = search_tools()
