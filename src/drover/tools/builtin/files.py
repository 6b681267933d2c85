"""The file tools: ``read_file``, ``write_file`` and ``edit_file``.

Text is UTF-8 and is read and written exactly as is (no line numbers, line endings kept).
Every path goes through :func:`~drover.tools.workspace.resolve_in_workdir` and the
:class:`~drover.tools.workspace.PathRules` of the sandbox (hidden paths: no access; protected
paths: no writes). A file is opened without following a final symbolic link and checked to be
the file that was resolved, so a link a command swaps in meanwhile is refused. A file with more
than one hard link is not written: the write would change it under its other names too, which
may lie outside the working directory or be hidden. Reading one is allowed — a sandboxed
command cannot make such a link (a hard link across the sandbox's mounts fails with EXDEV), so
the links there are the user's. Blocking file I/O runs in a worker thread so a large file does
not stall the event loop.

Before ``write_file`` or ``edit_file`` writes, what the file holds goes to ``ctx.files`` (a
turn's journal keeps it, so a rewind can put it back); when that record cannot be made the
file is not written. No file is read past :data:`MAX_READ_BYTES`, counted by its apparent size
and by the blocks it takes (a sparse file is as large as it claims).

The permission rules decided on the path before the call ran; the path the tool resolves when
it runs is checked again against them (``ctx.rules``), so a link swapped in meanwhile cannot
take a write an allow rule let through, or a read a deny rule refuses, somewhere else.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
from collections.abc import Callable
from pathlib import Path

from drover.errors import ToolError
from drover.tools.base import Tool, ToolContext, ToolOutput
from drover.tools.decorator import tool
from drover.tools.workspace import (
    PathRules,
    cap_output,
    display_path,
    opened_as,
    resolve_in_workdir,
)

#: Files larger than this are not read whole; the model is pointed at grep or bash instead.
#: Nor does ``write_file`` replace one when the journal keeps what files held before a write
#: (it would have to read it). A file's size is the larger of its apparent size and the space
#: it takes on disk, and no more than this is ever read, however the file changes meanwhile.
MAX_READ_BYTES = 10 * 1024 * 1024


def stored_size(info: os.stat_result) -> int:
    """A file's size as a reader must count it: its apparent size (a sparse file of 10 GiB
    reads as 10 GiB of zeros) or the blocks it takes, whichever is larger."""
    return max(info.st_size, info.st_blocks * 512)


class _TooLarge(Exception):
    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size


def _read_bounded(fd: int, shown: str, limit: int) -> bytes:
    """The content of the regular file open as ``fd``, at most ``limit`` bytes (more:
    :class:`_TooLarge`, with the size found)."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise ToolError(f"'{shown}' is not a regular file")
    size = stored_size(info)
    if size > limit:
        raise _TooLarge(size)
    chunks: list[bytes] = []
    left = limit + 1  # one more: a file that grew meanwhile is caught, not read on
    try:
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as exc:
        raise ToolError(f"cannot read '{shown}': {exc.strerror or exc}") from None
    data = b"".join(chunks)
    if len(data) > limit:
        raise _TooLarge(len(data))
    return data


def _open(path: Path, shown: str, flags: int, mode: int = 0o666) -> int:
    """Open ``path`` without following a final symbolic link; check that it is ``path``."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except FileNotFoundError:
        raise ToolError(f"file not found: '{shown}'") from None
    except OSError as exc:
        if os.path.islink(path):
            raise ToolError(f"'{shown}' became a symbolic link while being opened") from None
        raise ToolError(f"cannot open '{shown}': {exc.strerror or exc}") from None
    if not opened_as(fd, path):
        if flags & os.O_EXCL:  # created where a swapped link led: take it back
            with contextlib.suppress(OSError):
                os.unlink(os.readlink(f"/proc/self/fd/{fd}"))
        os.close(fd)
        raise ToolError(f"'{shown}' changed while being opened (a symbolic link on the way?)")
    return fd


def _read_text(path: Path, shown: str) -> str:
    """The UTF-8 text of an existing regular file, or a ToolError the model can act on."""
    if path.is_dir():
        raise ToolError(
            f"'{shown}' is a directory, not a file; list it with glob "
            f"(pattern '{shown.rstrip('/')}/*') instead"
        )
    fd = _open(path, shown, os.O_RDONLY | os.O_NONBLOCK)
    try:
        data = _read_bounded(fd, shown, MAX_READ_BYTES)
    except _TooLarge as exc:
        raise ToolError(
            f"'{shown}' is too large to read whole ({exc.size:,} bytes, limit "
            f"{MAX_READ_BYTES:,}); search it with grep or show parts with bash (head, sed -n)"
        ) from None
    finally:
        os.close(fd)
    if b"\x00" in data:
        raise ToolError(f"'{shown}' is a binary file; read_file only reads UTF-8 text")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ToolError(
            f"'{shown}' is not UTF-8 text (undecodable byte at offset {exc.start}); "
            "it may be binary or in another encoding"
        ) from None


def _write_text(path: Path, shown: str, content: str) -> tuple[int, bool]:
    """Write ``content``, creating parent directories; returns (bytes, whether it existed)."""
    data = content.encode("utf-8")
    return len(data), write_bytes(path, shown, data)


def write_bytes(path: Path, shown: str, data: bytes) -> bool:
    """Write ``data`` to the regular file ``path`` (created with its parent directories when
    missing; never through a final symbolic link, never one with other hard links); whether
    it existed. A :class:`~drover.errors.ToolError` says why it could not."""
    if path.is_dir():
        raise ToolError(f"'{shown}' is a directory; give the path of a file inside it")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ToolError(f"cannot write '{shown}': {exc.strerror or exc}") from None
    existed = True
    try:
        fd = _open(path, shown, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        existed = False
    except ToolError:
        if not os.path.lexists(path):
            raise
        fd = _open(path, shown, os.O_WRONLY)
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(os.close, fd)
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ToolError(f"'{shown}' is not a regular file")
        if info.st_nlink > 1:
            raise ToolError(
                f"'{shown}' has {info.st_nlink} hard links: writing it would change the file "
                "under its other names too, which may lie outside the working directory. Make "
                f"it a file of its own first (bash: cp '{shown}' tmp && mv tmp '{shown}')"
            )
        try:
            os.ftruncate(fd, 0)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        except OSError as exc:
            raise ToolError(f"cannot write '{shown}': {exc.strerror or exc}") from None
    return existed


def read_bytes(path: Path) -> bytes | None:
    """What the regular file ``path`` (resolved) holds now (None: there is no such file, or it
    is not a regular file); read without following a final symbolic link. A
    :class:`~drover.errors.ToolError` when the file opened is not ``path`` (a link on the way
    was swapped in)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        if not opened_as(handle.fileno(), path):
            raise ToolError(f"'{path}' changed while being opened (a symbolic link on the way?)")
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return None
        return handle.read()


def remove_file(path: Path, shown: str) -> None:
    """Delete the regular file ``path`` (resolved; nothing when it is gone), reached from its
    directory as opened, so that a symbolic link swapped in on the way is refused, not
    followed. A :class:`~drover.errors.ToolError` says why it could not."""
    try:
        parent = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    except OSError as exc:
        if os.path.islink(path.parent):
            raise ToolError(f"'{shown}' changed while being deleted (a symbolic link)") from None
        raise ToolError(f"cannot delete '{shown}': {exc.strerror or exc}") from None
    try:
        if not opened_as(parent, path.parent):
            raise ToolError(f"'{shown}' changed while being deleted (a symbolic link on the way?)")
        try:
            info = os.stat(path.name, dir_fd=parent, follow_symlinks=False)
            if not stat.S_ISREG(info.st_mode):
                raise ToolError(f"'{shown}' is no longer a regular file")
            os.unlink(path.name, dir_fd=parent)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise ToolError(f"cannot delete '{shown}': {exc.strerror or exc}") from None
    finally:
        os.close(parent)


def _edited(path: Path, shown: str, old_string: str, new_string: str) -> tuple[str, str]:
    """The file's text now and with the one occurrence of ``old_string`` replaced."""
    text = _read_text(path, shown)
    count = text.count(old_string)
    if count == 0:
        raise ToolError(
            f"old_string was not found in '{shown}' (0 occurrences); it must match the file "
            "exactly, including whitespace and indentation — read the file and copy the text"
        )
    if count > 1:
        raise ToolError(
            f"old_string occurs {count} times in '{shown}'; it must occur exactly once — "
            "include more surrounding lines to make it unique"
        )
    return text, text.replace(old_string, new_string, 1)


def _before(path: Path, shown: str) -> tuple[bool, bytes | None]:
    """Whether a write of ``path`` can be recorded, and what it holds (None: no file). A path
    that is not a regular file cannot: the write refuses it (or it is a pipe, with nothing to
    put back). A file over :data:`MAX_READ_BYTES` is refused: its content is not read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return True, None
    except OSError:
        return not os.path.lexists(path), None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False, None
        return True, _read_bounded(fd, shown, MAX_READ_BYTES)
    except _TooLarge as exc:
        raise ToolError(
            f"'{shown}' holds {exc.size:,} bytes, more than the {MAX_READ_BYTES:,} that "
            "write_file reads to keep a file's content for a rewind; it was not replaced "
            "(remove it with bash first if it should go)"
        ) from None
    finally:
        os.close(fd)


async def _keep_before(ctx: ToolContext, path: Path, shown: str, after: bytes) -> str:
    """Record what ``path`` holds before the call writes ``after`` (see ``ctx.files``); the
    note to add to the result ("" for none)."""
    if ctx.files is None:
        return ""
    recordable, before = await asyncio.to_thread(_before, path, shown)
    if not recordable:
        return ""
    note = await ctx.files.before_write(ctx.call_id, path, shown, before, after)
    return "" if note is None else f"\n{note}"


def file_tools(rules: PathRules | None = None) -> tuple[Tool, Tool, Tool]:
    """``read_file``, ``write_file`` and ``edit_file`` under ``rules`` (None: the default
    rules, computed at each call)."""
    current: Callable[[], PathRules] = (lambda: rules) if rules is not None else PathRules.default

    def resolve(ctx: ToolContext, path: str, *, write: bool) -> tuple[Path, str]:
        root = ctx.workdir.resolve()
        resolved = resolve_in_workdir(root, path)
        current().check(root, path, resolved, write=write)
        refusal = None if ctx.rules is None else ctx.rules.refusal(resolved)
        if refusal is not None:
            raise ToolError(refusal)
        return resolved, display_path(root, resolved)

    @tool(read_only=True)
    async def read_file(ctx: ToolContext, path: str) -> ToolOutput:
        """Read a UTF-8 text file from the working directory and return its content exactly.

        Args:
            path: The file to read, relative to the working directory.
        """
        resolved, shown = resolve(ctx, path, write=False)
        text = await asyncio.to_thread(_read_text, resolved, shown)
        return cap_output(text)

    @tool
    async def write_file(ctx: ToolContext, path: str, content: str) -> str:
        """Write a text file in the working directory, replacing it if it exists and creating
        parent directories as needed.

        Args:
            path: The file to write, relative to the working directory.
            content: The complete new content of the file.
        """
        resolved, shown = resolve(ctx, path, write=True)
        if resolved.is_dir():
            raise ToolError(f"'{shown}' is a directory; give the path of a file inside it")
        note = await _keep_before(ctx, resolved, shown, content.encode("utf-8"))
        size, existed = await asyncio.to_thread(_write_text, resolved, shown, content)
        verb = "Overwrote" if existed else "Created"
        return f"{verb} {shown} ({size:,} bytes written).{note}"

    @tool
    async def edit_file(ctx: ToolContext, path: str, old_string: str, new_string: str) -> str:
        """Replace one exact occurrence of old_string with new_string in a text file. old_string
        must occur exactly once in the file: include enough surrounding lines to make it unique.
        To create a file, use write_file.

        Args:
            path: The file to edit, relative to the working directory.
            old_string: The exact text to replace, including whitespace and indentation.
            new_string: The text to put in its place (may be empty to delete old_string).
        """
        if not old_string:
            raise ToolError(
                "old_string must not be empty; to create or replace a file use write_file"
            )
        if old_string == new_string:
            raise ToolError("old_string and new_string are identical; there is nothing to change")
        resolved, shown = resolve(ctx, path, write=True)
        _, edited = await asyncio.to_thread(_edited, resolved, shown, old_string, new_string)
        data = edited.encode("utf-8")
        note = await _keep_before(ctx, resolved, shown, data)
        await asyncio.to_thread(write_bytes, resolved, shown, data)
        old_lines = old_string.count("\n") + 1
        new_lines = new_string.count("\n") + 1 if new_string else 0
        return f"Edited {shown}: replaced {old_lines} line(s) with {new_lines} line(s).{note}"

    return read_file, write_file, edit_file


read_file, write_file, edit_file = file_tools()
