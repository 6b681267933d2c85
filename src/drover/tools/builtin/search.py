"""The search tools: ``glob {pattern}`` lists files, ``grep {pattern, path?}`` searches their text.

Both are read-only, confined to the working directory (a symlink leading outside is neither
listed nor read), blind to the hidden paths of the sandbox's
:class:`~drover.tools.workspace.PathRules` and to the files a permission rule refuses to read
(``ctx.rules``: a deny rule on ``read_file``), neither listed nor searched, nor reached
through a symlink, sorted for stable output, and capped. The directory walk runs in a worker
thread that stops early when the call is cancelled.

``grep`` matches in a child process (:mod:`drover.tools.builtin.grep_worker`): Python's
regular expressions backtrack, and one like ``(a+)+$`` would otherwise hold drover's GIL for
minutes, stalling every turn of the process. The child gets :data:`GREP_SECONDS` of wall time
(then it is killed and the call says why, with the matches found until then), bounded memory,
and reads no file larger than :data:`MAX_GREP_FILE_BYTES` — counted by its apparent size and
by the blocks it takes, so a sparse file is not read as gigabytes of zeros.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

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
#: Seconds one grep call may take (the walk and the search); then it stops and says so.
GREP_SECONDS = 30.0
#: Files larger than this are not searched (the call names them; bash's grep can).
MAX_GREP_FILE_BYTES = 10 * 1024 * 1024
#: The most memory the search process may map (bytes), and CPU seconds it may use.
GREP_MEMORY = 1 << 30
_BINARY_SNIFF = 8_192
_WORKER = Path(__file__).with_name("grep_worker.py")
#: Bytes of one line of the worker's output that drover reads (a match is cut far below).
_LINE_LIMIT = 1 << 20

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
    root: Path, pattern: str, excluded: Callable[[Path], bool], stop: threading.Event
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
        if not inside(match) or excluded(match):
            continue
        shown = relative.as_posix()
        if shown == ".":
            continue
        found.append(shown + "/" if match.is_dir() else shown)
    found.sort()
    return found[:MAX_GLOB_RESULTS], len(found)


# -- grep --------------------------------------------------------------------------------------


def _files_under(
    root: Path, start: Path, excluded: Callable[[Path], bool], stop: threading.Event
) -> Iterator[Path]:
    """Files under ``start`` in sorted order, skipping VCS directories, escapes and what
    ``excluded`` says (hidden paths, paths no rule lets be read)."""
    if not start.is_dir():
        yield start
        return
    for directory, dirnames, filenames in os.walk(start):
        if stop.is_set():
            return
        dirnames[:] = sorted(
            d for d in dirnames if d not in SKIPPED_DIRS and not excluded(Path(directory, d))
        )
        for name in sorted(filenames):
            path = Path(directory, name)
            if path.is_symlink() and not _inside(root, path):
                continue
            if excluded(path):
                continue
            yield path


@dataclass(slots=True)
class _Search:
    """What one grep call found."""

    #: ``path:line:text`` lines, at most ``MAX_GREP_MATCHES + 1`` (one more: the cap was hit).
    matches: list[str] = field(default_factory=list)
    #: Files too large to search: (as shown, size).
    too_large: list[tuple[str, int]] = field(default_factory=list)
    #: Whether the time budget ran out first.
    timed_out: bool = False


def _feed(
    fd: int,
    header: dict[str, Any],
    files: Iterator[Path],
    root: Path,
    shown: list[str],
) -> None:
    """Write ``header`` then each file of ``files`` (as ``[index, resolved path]``) to the
    search process's stdin ``fd`` as the walk finds them, noting how each is shown first; in
    a worker thread. Ends when the walk does, or when the process stops reading (it found
    enough, or was killed)."""
    try:
        os.write(fd, json.dumps(header).encode() + b"\n")
        for path in files:
            try:
                resolved = path.resolve()
            except (OSError, RuntimeError):
                continue
            if not resolved.is_relative_to(root):
                continue
            shown.append(display_path(root, path))
            line = json.dumps([len(shown) - 1, str(resolved)]).encode() + b"\n"
            view = memoryview(line)
            while view:
                view = view[os.write(fd, view) :]
    except (BrokenPipeError, ConnectionResetError):
        pass
    finally:
        os.close(fd)


async def _run_search(
    pattern: str, root: Path, walk: Callable[[threading.Event], Iterator[Path]], found: _Search
) -> None:
    """Search the files ``walk`` yields for ``pattern`` in a child process, into ``found``;
    raises :class:`ToolError` for a pattern that does not compile. The walk runs in a thread
    that feeds the child as it goes; both end when the call does, however it ends."""
    header = {
        "pattern": pattern,
        "max_matches": MAX_GREP_MATCHES + 1,
        "max_line": MAX_GREP_LINE,
        "max_bytes": MAX_GREP_FILE_BYTES,
        "sniff": _BINARY_SNIFF,
        "memory": GREP_MEMORY,
        "cpu": int(GREP_SECONDS) + 5,
    }
    read_end, write_end = os.pipe()
    try:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-I",
            "-S",
            str(_WORKER),
            stdin=read_end,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            limit=_LINE_LIMIT,
        )
    except BaseException:
        os.close(write_end)
        raise
    finally:
        os.close(read_end)
    assert process.stdout is not None and process.stderr is not None
    shown: list[str] = []
    stop = threading.Event()
    feeding = asyncio.ensure_future(
        asyncio.to_thread(_feed, write_end, header, walk(stop), root, shown)
    )
    said = asyncio.ensure_future(_tail(process.stderr, 4096))
    try:
        while line := await process.stdout.readline():
            message: dict[str, Any] = json.loads(line)
            if "error" in message:
                raise ToolError(str(message["error"]))
            if "m" in message:
                index, number, text = message["m"]
                found.matches.append(f"{shown[index]}:{number}:{text}")
            elif "big" in message:
                index, size = message["big"]
                found.too_large.append((shown[index], int(size)))
        code = await process.wait()
        if code != 0:
            why = (await said).decode(errors="replace").strip().splitlines()
            raise ToolError(
                f"the search failed (exit status {code}"
                + (f": {why[-1]}" if why else "")
                + "); narrow the pattern or the path"
            )
    finally:
        stop.set()
        said.cancel()
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
        # The feeder ends: its walk was told to stop, and its writes fail once the child is gone.
        await asyncio.shield(feeding)
        with contextlib.suppress(asyncio.CancelledError):
            await said


async def _tail(stream: asyncio.StreamReader, limit: int) -> bytes:
    """The last ``limit`` bytes ``stream`` gives until its end (a traceback ends with why)."""
    kept = b""
    while chunk := await stream.read(65536):
        kept = (kept + chunk)[-limit:]
    return kept


def _size(size: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20)):
        if size >= 1 << shift:
            return f"{size / (1 << shift):.1f} {unit}"
    return f"{size / 1024:.1f} KiB"


# -- the tools ---------------------------------------------------------------------------------


def search_tools(
    rules: PathRules | None = None, *, grep_seconds: float | None = None
) -> tuple[Tool, Tool]:
    """``glob`` and ``grep`` under ``rules`` (None: the default rules, computed at each call);
    ``grep_seconds`` bounds each grep call (None: :data:`GREP_SECONDS`)."""
    current: Callable[[], PathRules] = (lambda: rules) if rules is not None else PathRules.default

    def excluded(ctx: ToolContext, root: Path) -> Callable[[Path], bool]:
        """What the call must neither list nor search: hidden paths, unreadable ones."""
        hidden = current().hidden_in(root)
        check = ctx.rules
        return lambda path: _hidden(path, hidden) or (check is not None and check.hides(path))

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
        skip = excluded(ctx, root)
        try:
            shown, total = await _in_thread(lambda stop: _glob(root, relative, skip, stop))
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
        list them as 'path:line_number:line'. Binary files, .git directories and files over
        10 MiB are skipped; a search that runs too long is stopped.

        Args:
            pattern: A Python regular expression, e.g. 'def \\w+_test' or '(?i)todo'.
            path: A file or directory to search, relative to the working directory (default: all).
        """
        root = ctx.workdir.resolve()
        start = resolve_in_workdir(root, path)
        current().check(root, path, start, write=False)
        refusal = None if ctx.rules is None else ctx.rules.refusal(start)
        if refusal is not None:
            raise ToolError(refusal)
        if not start.exists():
            raise ToolError(f"path not found: '{display_path(root, start)}'")
        skip = excluded(ctx, root)
        found = _Search()
        seconds = GREP_SECONDS if grep_seconds is None else grep_seconds
        try:
            async with asyncio.timeout(seconds):
                await _run_search(
                    pattern, root, lambda stop: _files_under(root, start, skip, stop), found
                )
        except TimeoutError:
            found.timed_out = True
        return _grep_output(pattern, display_path(root, start), found, seconds)

    return glob, grep


def _grep_output(pattern: str, where: str, found: _Search, seconds: float) -> ToolOutput:
    """What the model is told of one grep call."""
    notes: list[str] = []
    if found.timed_out:
        notes.append(
            f"[grep was stopped after {seconds:g} s, before it finished: the pattern may "
            "backtrack catastrophically (nested repetition such as '(a+)+' over a long line) "
            "or the search covers too much; simplify the pattern or narrow the path]"
        )
    if len(found.matches) > MAX_GREP_MATCHES:
        notes.append(
            f"[stopped after {MAX_GREP_MATCHES:,} matching lines; "
            "narrow the pattern or the path to see the rest]"
        )
    if found.too_large:
        named = ", ".join(f"{shown} ({_size(size)})" for shown, size in found.too_large[:10])
        more = len(found.too_large) - 10
        notes.append(
            f"[not searched, over the {_size(MAX_GREP_FILE_BYTES)} limit: {named}"
            + (f" and {more:,} more" if more > 0 else "")
            + "; search them with bash (grep)]"
        )
    lines = found.matches[:MAX_GREP_MATCHES]
    if not lines and not notes:
        return ToolOutput(content=f"No matches for {pattern!r} in '{where}'.")
    if not lines and not found.timed_out:
        notes.insert(0, f"No matches for {pattern!r} in '{where}'.")
    return cap_output("\n".join([*lines, *notes]), is_error=found.timed_out)


glob, grep = search_tools()
