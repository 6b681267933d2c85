"""How long a watched process waited for a CPU: the kernel's run-queue delay of its threads.

The crash checks bound the text a SIGKILL may cost by time: text read from the pipe more than
``FLUSH_INTERVAL + PIPE_MARGIN`` before the kill must be in the database. The journal keeps
that promise in the process's own time — its timer fires 250 ms after the first unflushed
delta, its writer thread commits right after — but on a loaded machine a process can be ready
to run and still not run for a while: the timer then fires late, or the writer thread waits
for a CPU, through no fault of the journal. A fixed margin cannot cover that without either
flaking (too small) or hiding a slow gate on an idle machine (too large).

So the margin is measured: Linux keeps, for every thread, the nanoseconds it spent runnable
but waiting on a run queue (the second field of ``/proc/PID/task/TID/schedstat``). The watcher
samples it for every thread of the drover process with each line it reads and at the kill;
the time the work between a delta and its commit can have waited between two samples — the
main thread's waiting plus the writer thread's — is added to the window. On an idle machine
that is close to zero and the bound is the plain 250 ms + margin; under load it grows by the
time the kernel kept the process from running, so the check does not fail because of load,
and it still fails for a gate that waits too long while the process runs. The price is that
under heavy load the bound is looser: measured here with the whole suite running alongside,
the process waited 0.05–0.3 s for a CPU in a half-second window.

Where the kernel keeps no schedstat, every sample is empty and the window is the fixed one.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Waits:
    """Run-queue waits (ns) of a process's threads at one moment, by thread id."""

    pid: int = 0
    by_thread: Mapping[int, int] = field(default_factory=dict)

    def since(self, earlier: Waits) -> float:
        """Seconds the work on the way from a delta to its commit can have waited for a CPU
        from ``earlier`` to this sample: the main thread's waiting (the event loop: the timer,
        the take, the start of the write) plus the most any other thread waited (the journal
        writes on one worker thread; other threads — DNS lookups, a permission prompt — are
        not on that path, and counting each would only loosen the bound).

        A thread that started meanwhile counts all its waiting; one that ended meanwhile
        counts nothing (its schedstat is gone), which can only make a bound stricter.
        """
        grown = {
            tid: max(0, waited - earlier.by_thread.get(tid, 0))
            for tid, waited in self.by_thread.items()
        }
        main = grown.pop(self.pid, 0)
        return (main + max(grown.values(), default=0)) / 1e9


def waits(pid: int) -> Waits:
    """A sample for ``pid`` (empty once the process is gone, or without schedstat)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return Waits(pid)
    found: dict[int, int] = {}
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as stat:
                found[int(tid)] = int(stat.read().split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return Waits(pid, found)
