"""Protected paths: what a sandboxed command may read in a writable directory but never change.

Some files in a working directory hold code that runs outside the sandbox, later and without
asking: git runs ``core.fsmonitor`` and hooks from ``.git``, direnv sources ``.envrc``, drover
reads ``.drover/`` and starts the servers ``.mcp.json`` names. A command that could write them
could plant code that runs with the user's full rights. :data:`PROTECTED_NAMES` in the working
directory, the paths the config file adds, and — when ``.git`` is a file naming the repository
elsewhere (a worktree, a submodule) — that repository directory and its common directory, are
therefore mounted read-only over the writable working directory.

A protected path that does not exist must not be creatable either (a new ``.git`` makes a
repository whose config the command wrote). bubblewrap can only mount over a path that exists,
so drover creates a *placeholder* first: an empty directory, mounted read-only, which a command
can neither write into, remove nor replace (for a path below a missing directory, at that
directory, which the command then cannot create at all). Placeholders are removed when no
sandboxed command runs in the working directory any more: each call holds a shared ``flock``
on the working directory while it runs, and the call that ends last (the one that gets the
exclusive lock without waiting) removes every placeholder it finds, those of a drover that
was killed included. What marks a placeholder is an empty directory of drover's user with mode
555 and a modification time of 0 (1970): nobody makes those by hand, and adding anything to it
changes the time. git ignores an empty ``.git`` directory, so a placeholder does not disturb a
repository around it (an empty ``.git`` file would).

A protected path that is a symbolic link cannot be protected (a mount follows the link, and
the link itself could be replaced): commands are refused until the user replaces the link or
lists the path under ``[sandbox] writable``, which takes it out of the protected set.

Not covered: repositories nested below the top of the working directory, and the parents of a
protected path that lie inside the working directory (renaming one moves the mount away with
it; the default names sit at the top, whose directory is itself a mount and cannot be renamed).

:func:`writes_protected` is the textual check the permission policy uses: a command that names
a protected path, or runs a version-control command that changes the repository, is not
"contained" and is asked about in ``sandboxed`` mode. It is conservative and cannot be
complete (a shell can spell a name in endless ways); the read-only mounts stop the write
whatever the text says.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import re
import shlex
import stat
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from drover.errors import ToolError

#: Names in the working directory that commands may read but never write or create.
PROTECTED_NAMES = (".git", ".hg", ".svn", ".envrc", ".drover", ".mcp.json")

#: The mode of a placeholder: readable, so tools that walk the tree do not complain.
PLACEHOLDER_MODE = 0o555
#: Seconds a call waits for the working directory's lock (held exclusively only while
#: placeholders are removed) before it gives up.
LOCK_TIMEOUT = 10.0
_LOCK_POLL = 0.01

_VCS = frozenset({"git", "hg", "svn"})


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


#: Subcommands that only read the repository (git status may refresh the index, which the
#: read-only mount then refuses quietly).
_READS = {
    "git": _words(
        "annotate blame cat-file check-attr check-ignore count-objects describe diff "
        "diff-files diff-index diff-tree for-each-ref grep help log ls-files ls-remote ls-tree "
        "merge-base name-rev range-diff rev-list rev-parse shortlog show show-ref status var "
        "version whatchanged"
    ),
    "hg": _words(
        "annotate blame branches cat diff files grep heads help id identify log manifest "
        "parents paths root st status sum summary tags tip version"
    ),
    "svn": _words(
        "annotate blame cat di diff help info list log ls praise propget proplist st status"
    ),
}
#: git config options that make it a read.
_CONFIG_READS = frozenset(
    {"--get", "--get-all", "--get-regexp", "--get-urlmatch", "--list", "-l", "get", "list"}
)
#: Global options whose value is the next word.
_VCS_OPTION_VALUES = frozenset(
    {"-C", "-c", "--git-dir", "--work-tree", "--namespace", "-R", "--repository", "--cwd"}
)
_SHELL_OPERATORS = frozenset({";", "&", "&&", "|", "||", "(", ")", ";;", "|&", "\n"})


def normalized(path: Path) -> Path:
    """``path`` made absolute and free of ``..`` without following symbolic links."""
    return Path(os.path.normpath(os.path.abspath(path)))


def protected_paths(
    workdir: Path, extra: Iterable[Path] = (), unprotected: Iterable[Path] = ()
) -> tuple[Path, ...]:
    """The protected paths of ``workdir`` (resolved): its :data:`PROTECTED_NAMES`, ``extra``
    (absolute), and the repository directories a ``.git`` file names. A path in
    ``unprotected`` (the writable paths the user listed) is left out."""
    workdir = workdir.resolve()
    paths = [workdir / name for name in PROTECTED_NAMES]
    paths += [normalized(p) for p in extra]
    dotgit = workdir / ".git"
    if dotgit.is_file() and not dotgit.is_symlink():
        paths += _gitdirs(dotgit)
    released = {_real(p) for p in unprotected}
    unique: dict[Path, None] = {}
    for path in paths:
        if _real(path) not in released:
            unique.setdefault(path, None)
    return tuple(unique)


def _real(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return normalized(path)


def _gitdirs(dotgit: Path) -> list[Path]:
    """The repository directory a ``gitdir: PATH`` file names, and its common directory."""
    try:
        with dotgit.open(encoding="utf-8", errors="replace") as handle:
            first = handle.readline(4096).strip()
    except OSError:
        return []
    if not first.startswith("gitdir:"):
        return []
    gitdir = _real(dotgit.parent / first.removeprefix("gitdir:").strip())
    found = [gitdir]
    try:
        common = (gitdir / "commondir").read_text(encoding="utf-8").strip()
    except OSError:
        return found
    if common:
        found.append(_real(gitdir / common))
    return found


def inside(path: Path, roots: Iterable[Path]) -> Path | None:
    """The first of ``roots`` that ``path`` is, or lies below; None when it lies elsewhere."""
    for root in roots:
        if path == root or path.is_relative_to(root):
            return root
    return None


def _anchored(path: Path, roots: Sequence[Path]) -> tuple[Path, Path] | None:
    """(root, path spelled from that root) for a path inside one of the writable ``roots``.
    A path written through a symbolic link to a root (the roots are resolved) is spelled
    again from its resolved parent; its last component is never followed."""
    root = inside(path, roots)
    if root is None:
        path = _real(path.parent) / path.name
        root = inside(path, roots)
    if root is None or path == root:
        return None
    return root, path


@dataclass(frozen=True, slots=True)
class Protection:
    """One read-only mount over a writable directory."""

    path: Path
    #: The path did not exist: a placeholder must be made before the mount.
    missing: bool = False


def plan_protection(paths: Sequence[Path], roots: Sequence[Path]) -> list[Protection]:
    """The mounts that keep ``paths`` read-only inside the writable ``roots``.

    A path outside every root is read-only already. A missing path is protected by a
    placeholder at its first missing component. Raises :class:`ToolError` for a protected
    path that is, or lies below, a symbolic link inside a root.
    """
    plan: list[Protection] = []
    for path in paths:
        anchored = _anchored(path, roots)
        if anchored is not None:
            plan.append(_protection(anchored[1], anchored[0]))
    return plan


def _protection(path: Path, root: Path) -> Protection:
    current = root
    for part in path.relative_to(root).parts:
        current = current / part
        try:
            info = current.lstat()
        except FileNotFoundError:
            return Protection(current, missing=True)
        except OSError:
            break  # unreadable: commands cannot reach below it either
        if stat.S_ISLNK(info.st_mode):
            raise ToolError(
                f"cannot run commands: {current} is a symbolic link, and drover keeps it "
                "read-only for commands (it is a protected path). Replace the link by what it "
                "points to, or list the path under [sandbox] writable in the config file to "
                "let commands change it."
            )
        if not stat.S_ISDIR(info.st_mode):
            return Protection(current)  # a file: nothing can be created below it
    return Protection(path)


def make_placeholders(plan: Iterable[Protection]) -> None:
    """Create the placeholder of each missing path in ``plan``. One that cannot be made is
    left out (the command, as the same user without capabilities, cannot make it either)."""
    for item in plan:
        if not item.missing:
            continue
        try:
            os.mkdir(item.path, PLACEHOLDER_MODE)
        except OSError:
            continue  # made meanwhile (then it is protected as it is), or not makeable
        with contextlib.suppress(OSError):
            os.chmod(item.path, PLACEHOLDER_MODE)  # whatever the umask
            os.utime(item.path, (0, 0), follow_symlinks=False)


def is_placeholder(path: Path) -> bool:
    try:
        info = path.lstat()
    except OSError:
        return False
    return (
        stat.S_ISDIR(info.st_mode)
        and stat.S_IMODE(info.st_mode) == PLACEHOLDER_MODE
        and int(info.st_mtime) == 0
        and info.st_uid == os.getuid()
    )


def remove_placeholders(paths: Iterable[Path], roots: Sequence[Path]) -> None:
    """Remove every placeholder on the way to ``paths`` (a non-empty directory stays)."""
    for path in paths:
        anchored = _anchored(path, roots)
        if anchored is None:
            continue
        root, path = anchored
        current, chain = root, []
        for part in path.relative_to(root).parts:
            current = current / part
            chain.append(current)
        for candidate in reversed(chain):
            if is_placeholder(candidate):
                with contextlib.suppress(OSError):
                    candidate.rmdir()


@contextlib.asynccontextmanager
async def placeholders_guarded(
    workdir: Path, paths: Sequence[Path], roots: Sequence[Path]
) -> AsyncIterator[None]:
    """Hold the working directory's shared lock while a command runs; afterwards, when no
    other call holds it, remove the placeholders of ``paths``."""
    try:
        fd = os.open(workdir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise ToolError(f"cannot open the working directory {workdir}: {exc.strerror}") from None
    try:
        await _lock_shared(fd, workdir)
        try:
            yield
        finally:
            # Runs when the call is cancelled too. Converting to exclusive drops the shared
            # lock first; failing to get it means another call runs and will clean up.
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                pass
            else:
                remove_placeholders(paths, roots)
    finally:
        os.close(fd)


async def _lock_shared(fd: int, workdir: Path) -> None:
    """Take the shared lock without blocking the event loop; a bounded wait."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + LOCK_TIMEOUT
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if loop.time() >= deadline:
                raise ToolError(
                    f"the working directory {workdir} stayed locked for {LOCK_TIMEOUT:g} s "
                    "(another process holds an exclusive flock on it); try again"
                ) from None
            await asyncio.sleep(_LOCK_POLL)


# -- the textual check -------------------------------------------------------------------------


def name_pattern(names: Iterable[str]) -> re.Pattern[str] | None:
    """A pattern that finds any of ``names`` in a text as a path component (None for none)."""
    alternatives = sorted({re.escape(n) for n in names if n}, key=len, reverse=True)
    if not alternatives:
        return None
    # A name counts when it stands alone or as a path component: ".git/config" and "x/.git"
    # do, ".gitignore" and "repo.git" do not.
    return re.compile(r"(?<![\w.-])(?:" + "|".join(alternatives) + r")(?![\w.-])")


def protected_names(extra: Iterable[Path] = ()) -> list[str]:
    """The names a command would write to touch a protected path: :data:`PROTECTED_NAMES` and
    the last component of each ``extra`` path (a relative spelling ends with it too)."""
    return sorted({*PROTECTED_NAMES, *(p.name for p in extra if p.name)})


def writes_protected(command: str, names: Iterable[str] = PROTECTED_NAMES) -> bool:
    """Whether ``command`` may write a protected path: it names one of ``names``, or runs a
    git, hg or svn subcommand that is not a known read. Unparsable text counts as a write."""
    pattern = name_pattern(names)
    if pattern is not None and pattern.search(command):
        return True
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words = list(lexer)
    except ValueError:
        return True
    return any(_vcs_writes(words, i) for i, word in enumerate(words) if _is_vcs(word))


def _program(word: str) -> str:
    """The program a word names: ``/usr/bin/git`` and `` `git`` name ``git``."""
    return word.lstrip("`$({").rsplit("/", 1)[-1]


def _is_vcs(word: str) -> bool:
    # Any word, not only those in command position: a false alarm only means a question.
    return _program(word) in _VCS


def _vcs_writes(words: list[str], start: int) -> bool:
    tool = _program(words[start])
    rest = words[start + 1 :]
    end = next((i for i, w in enumerate(rest) if w in _SHELL_OPERATORS), len(rest))
    rest = rest[:end]
    i = 0
    while i < len(rest) and rest[i].startswith("-"):
        i += 2 if rest[i] in _VCS_OPTION_VALUES else 1
    if i >= len(rest):
        return False  # no subcommand: help or version output
    sub, args = rest[i].rstrip("`)}"), rest[i + 1 :]
    if tool == "git" and sub == "config":
        return not _CONFIG_READS.intersection(args)
    return sub not in _READS[tool]
