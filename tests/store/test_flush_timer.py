"""The journal's flush timer with the event loop's own sleep: a lazy timer callback."""

from __future__ import annotations

import asyncio
from typing import Any

from drover.journal.flush_timer import FlushTimer


class Flushes:
    def __init__(self) -> None:
        self.at: list[float] = []
        self.done = asyncio.Event()

    async def __call__(self) -> None:
        self.at.append(asyncio.get_running_loop().time())
        self.done.set()


def _count_scheduling(loop: asyncio.AbstractEventLoop) -> list[float]:
    """The delays of the callbacks scheduled on ``loop`` from now on."""
    scheduled: list[float] = []
    call_at, call_later = loop.call_at, loop.call_later

    def counted_at(when: float, *args: Any, **kwargs: Any) -> asyncio.TimerHandle:
        scheduled.append(when - loop.time())
        return call_at(when, *args, **kwargs)

    def counted_later(delay: float, *args: Any, **kwargs: Any) -> asyncio.TimerHandle:
        scheduled.append(delay)
        return call_later(delay, *args, **kwargs)

    loop.call_at = counted_at  # type: ignore[method-assign]
    loop.call_later = counted_later  # type: ignore[method-assign]
    return scheduled


async def test_starting_and_cancelling_schedules_one_callback() -> None:
    """A journal starts and cancels its timer a few times a step: the loop's timer heap gets
    one callback for all of it, not one (then a cancelled entry) each time."""
    loop = asyncio.get_running_loop()
    flushes = Flushes()
    timer = FlushTimer(30.0, flushes, clock=loop.time, sleep=asyncio.sleep)
    scheduled = _count_scheduling(loop)
    for _ in range(100):
        timer.start()
        assert timer.pending
        timer.cancel()
        assert not timer.pending
    assert len(scheduled) == 1
    timer.close()
    assert flushes.at == []


async def test_a_timer_started_again_fires_at_its_new_deadline_not_the_old_one() -> None:
    loop = asyncio.get_running_loop()
    flushes = Flushes()
    timer = FlushTimer(0.05, flushes, clock=loop.time, sleep=asyncio.sleep)
    timer.start()
    timer.cancel()
    await asyncio.sleep(0.02)
    started = loop.time()
    timer.start()  # the first callback is still scheduled, for ~0.03 s from now
    await asyncio.wait_for(flushes.done.wait(), timeout=10)
    assert len(flushes.at) == 1
    assert flushes.at[0] >= started + 0.05
    assert not timer.pending


async def test_a_cancelled_timer_never_flushes() -> None:
    loop = asyncio.get_running_loop()
    flushes = Flushes()
    timer = FlushTimer(0.01, flushes, clock=loop.time, sleep=asyncio.sleep)
    timer.start()
    timer.cancel()
    # A later timer on the loop fires after the cancelled one's time.
    later = asyncio.Event()
    loop.call_later(0.03, later.set)
    await asyncio.wait_for(later.wait(), timeout=10)
    assert flushes.at == []
    assert not timer.pending
