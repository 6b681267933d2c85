"""Takeover: turns whose process died are ended by a live one and, by default, resumed there.

Every running turn holds a lease its runner renews (a third of the lease apart). Each server
process on a shared PostgreSQL journal looks every ``interval`` seconds for running turns whose
lease expired or whose owner is a dead process on this machine, and recovers them as startup
recovery does (:meth:`~drover.store.base.Store.recover_orphans`: open tool calls end
``interrupted``, a call whose outcome is unknown says so, unflushed text is lost, flushed text
kept as a partial message, the turn ends ``interrupted`` with its terminal event). The store
takes each turn under a row lock with ``SKIP LOCKED`` and re-checks its owner and lease, so one
process alone recovers a turn — and only that process resumes it, as a continuation turn
(``prompt=None``) whose history tells the model which calls were cut off.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

Recover = Callable[[], Awaitable[list[str]]]
Sessions = Callable[[list[str]], Awaitable[dict[str, str]]]
Resume = Callable[[str], Awaitable[object]]


async def watch(
    recover: Recover,
    sessions: Sessions,
    resume: Resume | None,
    *,
    interval: float,
    recovered: Callable[[str], None] = lambda session_id: None,
) -> None:
    """Run until cancelled: recover expired turns, tell ``recovered`` each one's session (its
    followers must go back to the log), and resume those this process took."""
    while True:
        await asyncio.sleep(interval)
        try:
            taken = await recover()
            if not taken:
                continue
            log.warning("took over %d turn(s) of dead processes: %s", len(taken), taken)
            owners = await sessions(taken)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("takeover: could not look for expired turns (%s)", exc)
            continue
        for turn_id in taken:
            session_id = owners.get(turn_id)
            if session_id is None:
                continue
            recovered(session_id)
            if resume is None:
                continue
            try:
                await resume(session_id)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # busy (a client posted first), closing, …
                log.info("takeover: turn %s not resumed (%s)", turn_id, exc)
