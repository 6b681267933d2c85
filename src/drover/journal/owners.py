"""Who runs a turn: the ``host:pid:start`` id of a process, and whether it may still be alive.

A running turn records the id of the process that holds it; recovery asks
:func:`owner_alive` before it takes back a turn whose lease still holds, and
:func:`holder_gone` says whether a ``running`` turn has nobody left to run it (recovery ends
it; ``drover sessions`` and ``drover show`` call it abandoned until then).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable


def _stat_fields(pid: int) -> list[str]:
    """The fields of ``/proc/<pid>/stat`` after the command name (which may hold spaces and
    parentheses): ``[0]`` the state, ``[19]`` the start time in clock ticks since boot."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        return f.read().rsplit(")", 1)[1].split()


def owner_id() -> str:
    """Identifies this process: host, pid and start time (so a reused pid is not mistaken)."""
    try:
        start = _stat_fields(os.getpid())[19]
    except (OSError, IndexError):
        start = str(int(time.time()))
    import socket  # here: the journal's readers (drover sessions, drover show) never need it

    return f"{socket.gethostname()}:{os.getpid()}:{start}"


def owner_alive(owner: str) -> bool:
    """Whether the process an owner id (:func:`owner_id`) names may still be running.

    A local owner is dead when its pid is gone, a zombie, or reused by a process that started
    at another time. Owners on other hosts count as alive: their lease decides.
    """
    parts = owner.rsplit(":", 2)
    if len(parts) != 3:
        return True
    host, pid_text, start = parts
    import socket

    if host != socket.gethostname():
        return True
    try:
        pid = int(pid_text)
    except ValueError:
        return True
    if pid <= 0:
        return False
    if os.path.isdir("/proc/self"):
        try:
            fields = _stat_fields(pid)
        except FileNotFoundError:
            return False
        except (OSError, IndexError):
            pass
        else:
            return len(fields) > 19 and fields[0] not in ("Z", "X") and fields[19] == start
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def holder_gone(
    owner: str | None,
    lease_expires_at: float | None,
    now: float,
    alive: Callable[[str], bool] = owner_alive,
) -> bool:
    """Whether a ``running`` turn's holder is gone: its lease expired (or it has none), or it
    names no owner or one that is not ``alive``."""
    held = lease_expires_at is not None and lease_expires_at > now
    return not (held and owner is not None and alive(owner))
