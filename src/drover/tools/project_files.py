"""The files of a project drover reads on its own, and only those a project may hand it.

drover reads some files of the working directory without being asked: the instructions
(``AGENTS.md``/``CLAUDE.md``, also in the parents up to the repository root) that join the
system prompt, and the ``.mcp.json`` that names the project's servers. Whoever wrote the
repository — or the model, in an earlier turn — chose what those names are. A symbolic link
named ``AGENTS.md`` that leads to ``/proc/self/environ`` would put drover's API keys in the
prompt, one into ``~/.ssh`` a private key; a FIFO would hang the start, a sparse file of
terabytes fill the memory. So :func:`read_project_file` reads such a file only when

* where it leads (every link followed) lies inside the project's root, and not in a path the
  sandbox hides (credential stores, drover's own data: the project may be the home directory),
  nor in ``/proc``, ``/sys`` or ``/dev``;
* it is a regular file, opened without following a final link, and the file opened is the one
  checked (a link swapped in between is refused);
* it holds at most ``limit`` bytes (:data:`MAX_BYTES` by default).

Anything else raises :class:`ProjectFileRefused` with one line saying why; the callers warn with
it and go on without the file. A file the user keeps for themselves (next to ``config.toml``)
is no project's: :func:`read_user_file` only asks it to be a regular file within the limit.

Every project file drover reads itself goes through here; a new one (a project's settings,
hooks or commands, should drover read any) must too.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from drover.tools.workspace import PathRules, opened_as

#: The largest project file read (far more than any instructions or server list needs).
MAX_BYTES = 1024 * 1024
#: File systems whose "regular files" are the kernel's or the devices' (``environ``, ``mem``).
_PSEUDO = (Path("/proc"), Path("/sys"), Path("/dev"))


class ProjectFileRefused(Exception):
    """A project file drover will not read; the message says why, in one line."""


def read_project_file(path: Path, root: Path, *, limit: int = MAX_BYTES) -> bytes | None:
    """The content of ``path``, a file of the project at ``root`` (None: there is none);
    raises :class:`ProjectFileRefused` (see the module docstring)."""
    if not _exists(path):
        return None
    top = root.resolve()
    try:
        resolved = path.resolve(strict=True)
    except FileNotFoundError:
        return None  # a link to nothing: as if there were no file
    except (OSError, RuntimeError) as exc:
        raise ProjectFileRefused(f"{path}: cannot be resolved ({_why(exc)})") from None
    if not (resolved == top or resolved.is_relative_to(top)):
        raise ProjectFileRefused(f"{path} leads outside the project, to {resolved}")
    for hidden in (*PathRules.default().hidden_in(top), *_PSEUDO):
        if resolved == hidden or resolved.is_relative_to(hidden):
            raise ProjectFileRefused(f"{path} leads to {resolved}, which drover does not read")
    return _read_regular(path, resolved, limit)


def read_user_file(path: Path, *, limit: int = MAX_BYTES) -> bytes | None:
    """The content of ``path``, a file of the user's own (None: there is none), when it is a
    regular file of at most ``limit`` bytes; raises :class:`ProjectFileRefused` otherwise."""
    try:
        resolved = path.resolve(strict=True)
    except FileNotFoundError:
        return None
    except (OSError, RuntimeError) as exc:
        raise ProjectFileRefused(f"{path}: cannot be resolved ({_why(exc)})") from None
    return _read_regular(path, resolved, limit)


def _read_regular(path: Path, resolved: Path, limit: int) -> bytes:
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(resolved, flags)
    except OSError as exc:
        raise ProjectFileRefused(f"{path}: cannot be opened ({_why(exc)})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ProjectFileRefused(f"{path} is not a regular file")
        if not opened_as(fd, resolved):
            raise ProjectFileRefused(f"{path} changed while it was opened")
        if info.st_size > limit:
            raise ProjectFileRefused(f"{path} is larger than {limit:,} bytes ({info.st_size:,})")
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 65536))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as exc:
        raise ProjectFileRefused(f"{path}: cannot be read ({_why(exc)})") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:
        raise ProjectFileRefused(f"{path} is larger than {limit:,} bytes")
    return data


def _exists(path: Path) -> bool:
    try:
        path.lstat()
    except OSError:
        return False
    return True


def _why(exc: BaseException) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
