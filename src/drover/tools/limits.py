"""How much a sandboxed command may use: how many processes, how much memory.

Two mechanisms, both applied to every call:

- Resource limits, set by the sandbox's start shell before the command runs: ``ulimit -u``
  (RLIMIT_NPROC, processes and threads) and ``ulimit -d`` (RLIMIT_DATA, the memory one process
  may allocate). The kernel never applies RLIMIT_NPROC to root — to uid 0 of the machine,
  whatever uid the user namespace shows — so for a drover running as root it bounds nothing.
- A ``pids`` cgroup for the call, when drover may create one: as root on a cgroup v1 ``pids``
  hierarchy, or in a cgroup v2 subtree delegated to the user with the ``pids`` controller
  enabled for its children. Its ``pids.max`` bounds the tasks of the whole sandbox, root or
  not. The cgroup is made below drover's own cgroup (so it stays inside whatever bounds drover
  itself), joined by a one-line shell that then becomes bubblewrap, and removed when the call
  ends; cgroups left by a drover that was killed are removed by the next call that makes one.

Memory is bounded per process, not for the sandbox as a whole: the total is at most the
process limit times the memory limit. drover does not make memory cgroups (a cgroup v1 memory
hierarchy is usually the container's own accounting, which it leaves alone).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import time
import uuid
from pathlib import Path

#: Processes (and threads) a sandboxed command may have at once, so a fork bomb cannot use up
#: the machine's process table before the timeout ends it.
DEFAULT_PROCESSES = 4096
#: Memory one process may allocate when the machine's size is unknown (bytes).
FALLBACK_MEMORY = 8 << 30
#: Prefix of the cgroups drover makes (``drover-PID-ID``).
CGROUP_PREFIX = "drover-"
#: Seconds drover keeps trying to remove a call's cgroup after the call.
REMOVE_TIMEOUT = 2.0
_REMOVE_POLL = 0.001

_ESCAPE = re.compile(r"\\([0-7]{3})")


def default_memory() -> int:
    """Half the machine's physical memory, in bytes: one runaway command cannot take it all."""
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return FALLBACK_MEMORY
    return max(pages * size // 2, 64 << 20) if pages > 0 and size > 0 else FALLBACK_MEMORY


def limit_shell(processes: int, memory: int) -> str:
    """Shell commands that set the limits for what follows. A limit above the hard limit drover
    was given cannot be raised: the lower one stays, hence the silenced errors."""
    kib = max(memory // 1024, 1)
    return f"ulimit -u {int(processes)} 2>/dev/null; ulimit -d {kib} 2>/dev/null; "


def _unescape(field: str) -> str:
    return _ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), field)


def _own_cgroups() -> dict[str, str]:
    """This process's cgroup per v1 controller, and ``""`` for the v2 hierarchy."""
    own: dict[str, str] = {}
    try:
        text = Path("/proc/self/cgroup").read_text(encoding="utf-8")
    except OSError:
        return own
    for line in text.splitlines():
        _id, _sep, rest = line.partition(":")
        controllers, _sep, path = rest.partition(":")
        for name in controllers.split(",") if controllers else [""]:
            own[name] = path
    return own


def _cgroup_mounts() -> list[tuple[str, str, Path, set[str]]]:
    """(file system type, root inside the hierarchy, mount point, super options) per mount."""
    mounts = []
    try:
        text = Path("/proc/self/mountinfo").read_text(encoding="utf-8")
    except OSError:
        return []
    for line in text.splitlines():
        fields = line.split()
        if "-" not in fields:
            continue
        dash = fields.index("-")
        if len(fields) < dash + 4 or len(fields) < 5:
            continue
        fstype = fields[dash + 1]
        if fstype in ("cgroup", "cgroup2"):
            options = set(fields[dash + 3].split(","))
            mounts.append((fstype, _unescape(fields[3]), Path(_unescape(fields[4])), options))
    return mounts


def pids_cgroup_root() -> Path | None:
    """The directory below which drover may make ``pids`` cgroups, or None where it cannot."""
    own = _own_cgroups()
    for fstype, root, mountpoint, options in _cgroup_mounts():
        if fstype == "cgroup" and "pids" in options and "pids" in own:
            path = own["pids"]
        elif fstype == "cgroup2" and "" in own:
            path = own[""]
        else:
            continue
        if root != "/" and path.startswith(root):
            path = path[len(root) :]
        base = mountpoint / path.lstrip("/")
        if fstype == "cgroup2":
            try:
                enabled = (base / "cgroup.subtree_control").read_text(encoding="ascii").split()
            except OSError:
                continue
            if "pids" not in enabled:
                continue
        if base.is_dir() and os.access(base, os.W_OK | os.X_OK):
            return base
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_stale(root: Path) -> None:
    """Remove the cgroups of drover processes that are gone (a non-empty one stays)."""
    with contextlib.suppress(OSError):
        for child in root.iterdir():
            pid = child.name[len(CGROUP_PREFIX) :].partition("-")[0]
            if child.name.startswith(CGROUP_PREFIX) and pid.isdigit() and not _alive(int(pid)):
                with contextlib.suppress(OSError):
                    child.rmdir()


class PidsCgroup:
    """One call's ``pids`` cgroup: made with its limit, joined by the wrapper, then removed."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls, root: Path, limit: int) -> PidsCgroup:
        """A new cgroup below ``root`` allowing ``limit`` tasks; OSError when it cannot be made."""
        _remove_stale(root)
        path = root / f"{CGROUP_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:12]}"
        path.mkdir()
        try:
            (path / "pids.max").write_text(f"{int(limit)}\n", encoding="ascii")
        except OSError:
            path.rmdir()
            raise
        return cls(path)

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` run by a shell that first moves itself into the cgroup, so that every
        process the command starts is counted from the first."""
        procs = str(self.path / "cgroup.procs")
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', procs, *argv]

    def _removed(self) -> bool:
        try:
            self.path.rmdir()
        except FileNotFoundError:
            return True
        except OSError:
            return False  # busy: the kernel releases exited tasks a moment after their end
        return True

    async def remove(self) -> None:
        """Remove the cgroup once its processes are gone; one still busy after
        :data:`REMOVE_TIMEOUT` seconds is left for the next drover (see the module)."""
        for _attempt in range(int(REMOVE_TIMEOUT / _REMOVE_POLL)):
            if self._removed():
                return
            await asyncio.sleep(_REMOVE_POLL)

    def remove_now(self) -> None:
        """:meth:`remove` for callers outside an event loop (the start-up probe)."""
        for _attempt in range(int(REMOVE_TIMEOUT / _REMOVE_POLL)):
            if self._removed():
                return
            time.sleep(_REMOVE_POLL)
