"""What a tool may touch and what it may return: working-directory confinement and the output cap.

Every path a model hands to a tool goes through :func:`resolve_in_workdir`, which refuses
anything that resolves outside the working directory — ``..`` components, absolute paths
elsewhere, and symlinks (at any position, dangling or not) whose target lies outside.

:class:`PathRules` narrows that further, as the sandbox does for commands: a hidden path (a
secret the sandbox hides) is neither read nor listed nor written, and a protected path
(``.git``, ``.envrc``… see :mod:`drover.tools.protect`) is not written. Both are checked on
the path as given and on where it leads, so a symbolic link a command planted cannot lead a
file tool to either. The file tools then open what they checked without following a final
symbolic link and verify that the opened file is the one checked (:func:`opened_as`), so a
link swapped in between is refused too.

Tool output shown to the model is bounded by :data:`MAX_OUTPUT_CHARS`: :func:`cap_output`
keeps the head and the tail and replaces the middle with a plain note saying how much was cut.
:class:`OutputBuffer` does the same for output that arrives in pieces (a running command),
holding at most about twice the cap in memory however much is produced.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from drover.errors import PathEscapeError, ToolError
from drover.tools.base import ToolOutput
from drover.tools.protect import normalized, protected_paths
from drover.tools.sandbox_settings import SandboxSettings, default_hidden

#: The most characters of tool output the model sees in one result. Beyond this the middle of
#: the output is cut (head and tail kept), the result says so in plain words, and
#: ``ToolOutput.truncated`` is set. 30,000 characters is roughly 7,500 tokens: enough for a
#: long file or a full test run, small enough that a few results fit the context window.
MAX_OUTPUT_CHARS = 30_000


def resolve_in_workdir(workdir: Path, path: str) -> Path:
    """Resolve ``path`` from the model against ``workdir``, refusing anything outside it.

    Relative paths are taken relative to ``workdir``; absolute paths are allowed when they lie
    inside it. Symlinks are followed wherever they occur (including the final component and
    a dangling link to a file not yet created) and the fully resolved result must be
    ``workdir`` itself or lie beneath it. Returns the resolved path.

    Raises :class:`~drover.errors.PathEscapeError` for a path outside the working directory and
    :class:`~drover.errors.ToolError` for an unusable one (empty, containing a NUL byte).
    """
    if not path:
        raise ToolError("path must not be empty")
    if "\x00" in path:
        raise ToolError(f"path {path!r} contains a NUL byte")
    root = workdir.resolve()
    candidate = Path(path)
    if not candidate.is_absolute():
        candidate = root / candidate
    try:
        resolved = candidate.resolve()
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop on some versions
        raise ToolError(f"cannot resolve path {path!r}: {exc}") from exc
    if not resolved.is_relative_to(root):
        raise PathEscapeError(f"path {path!r} is outside the working directory {root}")
    return resolved


def path_target(workdir: Path | str, path: str) -> Path | None:
    """Where ``path`` from the model leads, read as :func:`resolve_in_workdir` reads it
    (relative to ``workdir``, every symbolic link followed) but without refusing anything:
    what permission rules match a path on. None when it cannot be resolved (empty, a NUL
    byte, a link loop)."""
    if not path or "\x00" in path:
        return None
    candidate = Path(path)
    if not candidate.is_absolute():
        candidate = Path(workdir) / candidate
    try:
        return candidate.resolve()
    except (OSError, RuntimeError):
        return None


def _at_or_below(path: Path, anchors: Iterable[Path]) -> Path | None:
    for anchor in anchors:
        if path == anchor or path.is_relative_to(anchor):
            return anchor
    return None


def _both(paths: Iterable[Path]) -> list[Path]:
    """Each path as written and where it leads."""
    out: list[Path] = []
    for path in paths:
        out.append(normalized(path))
        with contextlib.suppress(OSError, RuntimeError):
            out.append(path.resolve())
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class PathRules:
    """What the file tools may not touch inside the working directory: hidden paths (no
    access at all) and protected paths (no writes)."""

    #: Paths no tool reads, lists or writes, absolute (those holding the working directory
    #: itself do not count: the working directory stays usable inside a hidden directory).
    hidden: tuple[Path, ...] = ()
    #: Protected paths besides :data:`~drover.tools.protect.PROTECTED_NAMES`, absolute.
    protected: tuple[Path, ...] = ()
    #: Writable paths the user listed: a protected path among them may be written.
    released: tuple[Path, ...] = ()

    @classmethod
    def default(cls) -> PathRules:
        """The default hidden paths (credential stores, drover's own data) and protections."""
        return cls(hidden=default_hidden())

    @classmethod
    def of(cls, settings: SandboxSettings) -> PathRules:
        """The rules the sandbox applies to commands, for the file tools."""
        return cls(hidden=settings.hidden, protected=settings.protected, released=settings.writable)

    def hidden_in(self, root: Path) -> list[Path]:
        """The hidden paths below ``root`` (resolved), as written and where they lead."""
        return [h for h in _both(self.hidden) if h != root and h.is_relative_to(root)]

    def check(self, root: Path, given: str, resolved: Path, *, write: bool) -> None:
        """Refuse ``given`` (resolved to ``resolved``) when it is hidden, or protected and
        ``write``. Raises :class:`~drover.errors.ToolError` naming the rule."""
        lexical = normalized(root / given)
        hidden = _at_or_below(lexical, self.hidden_in(root)) or _at_or_below(
            resolved, self.hidden_in(root)
        )
        if hidden is not None:
            raise ToolError(
                f"'{given}' is hidden from tools on purpose ({display_path(root, hidden)} may "
                "hold secrets); do not try to reach it another way, ask the user instead"
            )
        if not write:
            return
        protected = _both(protected_paths(root, self.protected, self.released))
        found = _at_or_below(lexical, protected) or _at_or_below(resolved, protected)
        if found is not None:
            raise ToolError(
                f"'{given}' is protected: {display_path(root, found)} may be read but not "
                "changed, because code placed there would run outside the sandbox (git hooks "
                "and config, .envrc, drover's settings); tell the user what to change instead"
            )


def opened_as(fd: int, path: Path) -> bool:
    """Whether the open file ``fd`` is ``path`` (and not a file a swapped link led to)."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}") == str(path)
    except OSError:
        pass  # no /proc: compare the file identities instead
    try:
        opened, there = os.fstat(fd), os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    return (opened.st_dev, opened.st_ino) == (there.st_dev, there.st_ino)


def display_path(workdir: Path, path: Path) -> str:
    """``path`` as the model should see it: relative to ``workdir`` in POSIX form.

    The working directory itself is shown as ``.``; a path outside it is shown as given.
    """
    root = workdir.resolve()
    try:
        relative = path.relative_to(root)
    except ValueError:
        return str(path)
    text = relative.as_posix()
    return text if text else "."


def _cut_note(cut: int, limit: int) -> str:
    return f"[... {cut:,} characters cut: output exceeded {limit:,} characters ...]"


def _head_tail(text: str, limit: int) -> tuple[str, str]:
    """Split the ``limit`` characters to keep into a head and a tail, preferring line breaks."""
    head_len = limit // 2
    tail_len = limit - head_len
    head = text[:head_len]
    tail = text[len(text) - tail_len :] if tail_len else ""
    # Cut at a line boundary when one is near, so no half lines are shown.
    window = max(limit // 10, 1)
    newline = head.rfind("\n")
    if newline >= 0 and head_len - (newline + 1) <= window:
        head = head[: newline + 1]
    newline = tail.find("\n")
    if 0 <= newline < window:
        tail = tail[newline + 1 :]
    return head, tail


def _join(head: str, tail: str, cut: int, limit: int) -> str:
    if head and not head.endswith("\n"):
        head += "\n"
    separator = "\n" if tail else ""
    return f"{head}{_cut_note(cut, limit)}{separator}{tail}"


def _capped(text: str, limit: int) -> tuple[str, bool]:
    if len(text) <= limit:
        return text, False
    head, tail = _head_tail(text, limit)
    return _join(head, tail, len(text) - len(head) - len(tail), limit), True


def cap_output(text: str, *, limit: int = MAX_OUTPUT_CHARS, is_error: bool = False) -> ToolOutput:
    """Wrap ``text`` in a :class:`ToolOutput`, cutting its middle if it exceeds ``limit``.

    A cut keeps the first and last ``limit // 2`` characters or so (snapped to line breaks
    when one is close) and puts a note in their place, e.g.
    ``[... 12,345 characters cut: output exceeded 30,000 characters ...]``.
    """
    content, truncated = _capped(text, limit)
    return ToolOutput(content=content, is_error=is_error, truncated=truncated)


class OutputBuffer:
    """Collects streamed output in bounded memory and caps it like :func:`cap_output`.

    It keeps the first ``limit`` characters and the last ``limit`` characters; anything in
    between is only counted. The result is the same as capping the whole text at once, except
    that the line-break snapping sees only what was kept.
    """

    def __init__(self, limit: int = MAX_OUTPUT_CHARS) -> None:
        self._limit = limit
        self._head: list[str] = []
        self._head_len = 0
        self._tail: list[str] = []
        self._tail_len = 0
        self._dropped = 0

    def append(self, text: str) -> None:
        room = self._limit - self._head_len
        if room > 0:
            taken = text[:room]
            self._head.append(taken)
            self._head_len += len(taken)
            text = text[room:]
        if not text:
            return
        self._tail.append(text)
        self._tail_len += len(text)
        if self._tail_len > 2 * self._limit:
            joined = "".join(self._tail)
            excess = len(joined) - self._limit
            self._dropped += excess
            self._tail = [joined[excess:]]
            self._tail_len = self._limit

    @property
    def total_chars(self) -> int:
        """How many characters were appended in all."""
        return self._head_len + self._tail_len + self._dropped

    def text(self) -> tuple[str, bool]:
        """The capped text and whether anything was cut."""
        kept = "".join(self._head) + "".join(self._tail)
        if not self._dropped:
            return _capped(kept, self._limit)
        head, tail = _head_tail(kept, self._limit)
        return _join(head, tail, self.total_chars - len(head) - len(tail), self._limit), True
