"""The journal's flush timer: buffered text is written at most ``interval`` after it arrived,
even when the stream stalls and no delta comes to check the time gate.

The journal starts the timer when text is buffered or a write is deferred and cancels it when
something flushes sooner — a few times a step. With the event loop's own ``asyncio.sleep`` it
is a plain timer callback (``loop.call_at``), and a lazy one: cancelling only forgets the
deadline, and starting again while the callback is still scheduled sets a new deadline without
scheduling another. A callback that finds no deadline does nothing; one that finds a later
deadline schedules itself for it. The loop's timer heap thus sees about one callback per
interval instead of a push and a cancelled entry for each start (three or four a step). With
an injected ``sleep`` (a test's fake clock) it is a task that sleeps on it. Either way the
flush itself runs as a task of its own once the timer fires: it is under way then, and no
longer pending, so an authoritative flush queues behind it instead of cancelling it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable


class FlushTimer:
    def __init__(
        self,
        interval: float,
        flush: Callable[[], Awaitable[None]],
        *,
        clock: Callable[[], float],
        sleep: Callable[[float], Awaitable[None]],
    ) -> None:
        self._interval = interval
        self._flush = flush
        self._clock = clock
        self._sleep = sleep
        # With the loop's sleep: when to flush (the loop's time; None: not started) and the
        # callback scheduled, at that time or earlier. With an injected sleep: the task.
        self._deadline: float | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None
        # The flush under way (a reference, so the task is not collected while it runs).
        self._flushing: asyncio.Task[None] | None = None

    @property
    def pending(self) -> bool:
        """Whether the timer is started and has not fired (or been cancelled) yet."""
        return self._deadline is not None or self._task is not None

    def start(self) -> None:
        """Fire ``interval`` from now, unless the timer is pending already."""
        if self._deadline is not None or self._task is not None:
            return
        loop = asyncio.get_running_loop()
        if self._sleep is asyncio.sleep:
            self._deadline = deadline = loop.time() + self._interval
            if self._handle is None:  # (else it comes at an earlier deadline, and moves)
                self._handle = loop.call_at(deadline, self._due)
        else:
            self._task = loop.create_task(self._tick(self._clock() + self._interval))

    def cancel(self) -> None:
        self._deadline = None  # (a callback already scheduled finds none and does nothing)
        task, self._task = self._task, None
        if task is not None:
            task.cancel()

    def close(self) -> None:
        """Cancel, and take the scheduled callback off the loop too (the journal is done)."""
        self.cancel()
        handle, self._handle = self._handle, None
        if handle is not None:
            handle.cancel()

    def _due(self) -> None:
        self._handle = None
        deadline = self._deadline
        if deadline is None:
            return  # cancelled since
        loop = asyncio.get_running_loop()
        if deadline > loop.time():  # started again after a cancel: not due yet
            self._handle = loop.call_at(deadline, self._due)
            return
        self._deadline = None
        self._flushing = loop.create_task(self._run())

    async def _tick(self, deadline: float) -> None:
        await self._sleep(max(0.0, deadline - self._clock()))
        self._task = None
        await self._run()

    async def _run(self) -> None:
        await self._flush()
