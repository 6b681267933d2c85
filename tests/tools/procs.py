"""Finding and waiting for real processes in tool tests (/proc scans and pidfds, no polling
loops without a bound)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name, or None: no such process."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            stat = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return stat.rsplit(")", 1)[1].split()


def process_state(pid: int) -> str | None:
    """The one-letter state of ``pid`` from /proc, or None when there is no such process."""
    fields = _stat(pid)
    return None if fields is None else fields[0]


def parent(pid: int) -> int | None:
    """The parent pid of ``pid`` from /proc, or None when there is no such process."""
    fields = _stat(pid)
    return None if fields is None else int(fields[1])


def alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie (dead, not yet reaped by its parent) counts as gone."""
    return process_state(pid) not in (None, "Z", "X")


def pids_with(marker: str) -> list[int]:
    """Live processes (seen from this PID namespace) whose command line contains ``marker``."""
    found = []
    needle = marker.encode()
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if needle in cmdline and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def pids_named(name: str) -> list[int]:
    """Live processes whose ``argv[0]`` is exactly ``name`` (set with ``exec -a``)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv0 = (entry / "cmdline").read_bytes().split(b"\0", 1)[0]
        except OSError:
            continue
        if argv0 == name.encode() and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


async def wait_dead(pid: int, within: float = 10.0) -> bool:
    """Wait via a pidfd (no polling) until ``pid`` has ended; False if it outlives ``within``."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    loop = asyncio.get_running_loop()
    gone: asyncio.Future[None] = loop.create_future()

    def readable() -> None:
        if not gone.done():
            gone.set_result(None)

    loop.add_reader(fd, readable)
    try:
        await asyncio.wait_for(gone, within)
    except TimeoutError:
        return False
    finally:
        loop.remove_reader(fd)
        os.close(fd)
    return True


async def all_dead(pids: list[int], within: float = 10.0) -> list[int]:
    """The pids of ``pids`` still running after ``within`` seconds (empty: all ended)."""
    results = await asyncio.gather(*(wait_dead(pid, within) for pid in pids))
    return [pid for pid, dead in zip(pids, results, strict=True) if not dead]
