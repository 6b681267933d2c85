"""Files only their owner may read: drover's data directory (700) and what it keeps (600).

The journal holds every prompt, answer, file content and command output of every session, the
MCP logs what servers print (their secrets too), the REPL's history what the user typed. On a
machine with other users none of it is theirs to read, whatever the umask of the process that
made it. So drover's own directories are made with mode 700 and its files with mode 600, and the
mode is set exactly after creation (a umask only removes bits, and one of 077 is the only one
that gives these modes by itself).

A directory or file drover owns and finds readable by others is *tightened* by
:func:`private_dir` and :func:`tighten` (the callers use them on drover's own paths: the default
data directory and the journal in it). A journal the user put elsewhere (``--db PATH``) is
created private but, once it exists, left as it is: it may be shared on purpose.
``drover doctor`` says when it is readable by others (:func:`exposed`).
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600
#: The bits that let others (the group, everyone) in.
_OTHERS = 0o077


def private_dir(path: Path) -> Path:
    """``path``, made (with its missing parents) if it does not exist, and tightened to 700
    when it is this user's; returns it."""
    path.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
    tighten(path)
    return path


def private_file(path: Path) -> bool:
    """Create ``path`` empty with mode 600 unless it exists; whether this call created it."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, PRIVATE_FILE)
    except FileExistsError:
        return False
    try:
        os.fchmod(fd, PRIVATE_FILE)
    finally:
        os.close(fd)
    return True


def open_private(path: Path, mode: str = "a") -> int:
    """A descriptor of ``path`` opened to append (``"a"``) or write (``"w"``), the file created
    with mode 600 when it is missing (an existing file keeps its mode unless it is drover's to
    tighten: :func:`tighten`)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | (os.O_APPEND if mode == "a" else os.O_TRUNC)
    fd = os.open(path, flags, PRIVATE_FILE)
    with contextlib.suppress(OSError):
        info = os.fstat(fd)
        if info.st_uid == os.geteuid() and info.st_mode & _OTHERS:
            os.fchmod(fd, stat.S_IMODE(info.st_mode) & ~_OTHERS)
    return fd


def tighten(path: Path) -> bool:
    """Take the group's and others' access away from ``path`` (not following a link) when it
    is this user's and they have any; whether it changed. Missing paths are left alone."""
    try:
        info = path.lstat()
    except OSError:
        return False
    if stat.S_ISLNK(info.st_mode) or info.st_uid != os.geteuid() or not info.st_mode & _OTHERS:
        return False
    try:
        path.chmod(stat.S_IMODE(info.st_mode) & ~_OTHERS)
    except OSError:
        return False
    return True


def exposed(path: Path) -> bool:
    """Whether others than the owner may read or write ``path`` (False when it is missing)."""
    try:
        return bool(path.stat().st_mode & _OTHERS)
    except OSError:
        return False
