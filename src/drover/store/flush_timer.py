"""The journal's flush timer: buffered text is written at most ``interval`` after it arrived,
even when the stream stalls and no delta comes to check the time gate.

The journal starts the timer when text is buffered or a write is deferred and cancels it when
something flushes sooner — a few times a step. With the event loop's own ``asyncio.sleep`` it
is a plain timer callback (``loop.call_later``): no task and no wake-up when it is cancelled,
which is how it ends most of the time. With an injected ``sleep`` (a test's fake clock) it is
a task that sleeps on it. Either way the flush itself runs as a task of its own once the
timer fires: it is under way then, and no longer pending, so an authoritative flush queues
behind it instead of cancelling it.
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
        self._pending: asyncio.TimerHandle | asyncio.Task[None] | None = None
        # The flush under way (a reference, so the task is not collected while it runs).
        self._flushing: asyncio.Task[None] | None = None

    @property
    def pending(self) -> bool:
        """Whether the timer is started and has not fired (or been cancelled) yet."""
        return self._pending is not None

    def start(self) -> None:
        """Fire ``interval`` from now, unless the timer is pending already."""
        if self._pending is not None:
            return
        loop = asyncio.get_running_loop()
        if self._sleep is asyncio.sleep:
            self._pending = loop.call_later(self._interval, self._due)
        else:
            self._pending = loop.create_task(self._tick(self._clock() + self._interval))

    def cancel(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.cancel()

    def _due(self) -> None:
        self._pending = None
        self._flushing = asyncio.get_running_loop().create_task(self._run())

    async def _tick(self, deadline: float) -> None:
        await self._sleep(max(0.0, deadline - self._clock()))
        self._pending = None
        await self._run()

    async def _run(self) -> None:
        await self._flush()
