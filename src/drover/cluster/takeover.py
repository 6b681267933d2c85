"""Takeover: turns whose process died are ended by a live server and, by default, resumed there.

Every running turn holds a lease its runner renews (a third of the lease apart). Each server
process looks for running turns whose lease expired or whose owner is a dead process on this
machine — once as it starts (a restart finds the turns the previous process left), then every
``interval`` seconds — and recovers them as any turn start does for its own session
(:meth:`~drover.runtime.runner.Runner.recover`: open tool calls end ``interrupted``, a call whose
outcome is unknown says so, unflushed text is lost, flushed text kept as a partial message, the
turn ends ``interrupted`` with its terminal event, and followers go back to the log). The store
takes each turn under a lock and re-checks its owner and lease, so one process alone recovers a
turn — and only that process resumes it, as a continuation turn (``prompt=None``) whose history
tells the model which calls were cut off. A turn recovered by a message posted to its own
session is resumed by that message's turn instead; so is one whose session has queued messages
(the resume runs the next of them, :mod:`drover.runtime.queue`). Each sweep also starts the
queues of sessions left with queued messages and no turn (a process died between a turn's end
and the next queued message's start, or the turn was only ended): queued messages are the
user's own, so they run whether taken-over turns are resumed or only ended.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

#: Takeover looks at least this often (seconds), whatever the lease.
MAX_WATCH_INTERVAL = 5.0

#: Ends dead processes' turns: ``{turn_id: session_id}`` of those it ended.
Recover = Callable[[], Awaitable[dict[str, str]]]
Resume = Callable[[str], Awaitable[object]]
#: Starts the queues nothing runs.
RunWaiting = Callable[[], Awaitable[object]]


async def sweep(
    recover: Recover, resume: Resume | None, waiting: RunWaiting | None = None
) -> list[str]:
    """Recover what is orphaned now and resume each recovered session (``resume`` None: only
    end them), then run the queues left waiting; the turn ids recovered."""
    taken = await recover()
    if taken:
        log.warning("took over %d turn(s) of dead processes: %s", len(taken), sorted(taken))
    for turn_id, session_id in taken.items():
        if resume is None:
            break
        try:
            await resume(session_id)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # busy (a client posted first), closing, …
            log.info("takeover: turn %s not resumed (%s)", turn_id, exc)
    # Queued messages are the user's own, not the cut-off work: they run in either mode.
    if waiting is not None:
        try:
            await waiting()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("takeover: could not start the waiting queues (%s)", exc)
    return list(taken)


async def watch(
    recover: Recover,
    resume: Resume | None,
    *,
    interval: float,
    first: bool = True,
    waiting: RunWaiting | None = None,
) -> None:
    """Run until cancelled: a sweep (at once unless not ``first``), then one every
    ``interval`` seconds."""
    if not first:
        await asyncio.sleep(interval)
    while True:
        try:
            await sweep(recover, resume, waiting)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("takeover: could not look for expired turns (%s)", exc)
        await asyncio.sleep(interval)
