"""The journal's write queue: writes in order, ready ones committed together, failures retried.

A :class:`~drover.journal.journal.Journal` pushes each write it decides on (a value of
:mod:`drover.journal.writes`) and drains the queue when a guarantee needs the writes durable. A
drain makes everything queued so far through the store's one write entry point
(:meth:`~drover.journal.protocol.TurnJournal.write_batch`): all of it in one executor hop and
one transaction (group commit) when the queue makes writes ``together``, else one write at a
time (a worker's log, which stores no messages of its own).

Failures keep the queue's order. A write that fails is retried at once, with a short backoff,
up to ``max_attempts`` times while later writes wait behind it; a batch that fails is made
again one write at a time, so a write that keeps failing is found and counted alone and those
before it are kept. One that still fails — or any write refused because this process no longer
holds the turn (:class:`~drover.errors.LeaseLostError`) — fails the queue: ``on_failure`` is
told, nothing more is written, and the durable record stays a consistent prefix of the turn.

``on_commit`` (the metrics' observer, when a server keeps them) hears of each transaction made:
how many writes it held and how long it took.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from drover.errors import LeaseLostError
from drover.journal.protocol import TurnJournal
from drover.journal.writes import JournalWrite

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Queued:
    what: str
    write: JournalWrite
    #: Called with the write's result once it is durable.
    done: Callable[[Any], None] | None = None
    #: The write that ends the turn.
    ends_turn: bool = False
    attempts: int = 0


class WriteQueue:
    def __init__(
        self,
        store: TurnJournal,
        *,
        together: bool,
        max_attempts: int,
        retry_delay: float,
        on_failure: Callable[[str, Exception], None],
        on_commit: Callable[[int, float], None] | None = None,
    ) -> None:
        self._store = store
        self._together = together
        self._on_commit = on_commit
        self._max_attempts = max_attempts
        self._retry_delay = retry_delay
        self._on_failure = on_failure
        self._queue: deque[Queued] = deque()
        self._lock = asyncio.Lock()
        # Writes at the head still to be made one at a time (their batch failed).
        self._solo = 0
        self.failed = False
        #: Whether the write that ends the turn was made (or started: it completes).
        self.ended = False
        #: Writes pushed and writes made (or started: they complete) since the queue began.
        self.pushed = 0
        self.made = 0

    def __len__(self) -> int:
        return len(self._queue)

    @property
    def groups(self) -> bool:
        """Whether queued writes are made together, in one transaction."""
        return self._together

    def push(
        self,
        what: str,
        write: JournalWrite,
        *,
        done: Callable[[Any], None] | None = None,
        ends_turn: bool = False,
    ) -> None:
        self._queue.append(Queued(what, write, done, ends_turn))
        self.pushed += 1

    def clear(self) -> None:
        self._queue.clear()
        self._solo = 0

    async def drain(self) -> bool:
        """Make the queued writes in order; False when the queue failed."""
        async with self._lock:
            while self._queue and not self.failed:
                if self._together and self._solo == 0 and len(self._queue) > 1:
                    await self._batch(list(self._queue))
                else:
                    await self._one(self._queue[0])
        return not self.failed

    async def _batch(self, batch: list[Queued]) -> None:
        writes = [q.write for q in batch]
        observe = self._on_commit
        began = 0.0 if observe is None else time.perf_counter()
        try:
            results: list[Any] = await self._store.write_batch(writes)
        except asyncio.CancelledError:
            # The store completes a batch it has started: it must not be made twice.
            self._made(batch)
            raise
        except Exception as exc:
            if isinstance(exc, LeaseLostError):
                self._fail(batch[0].what, exc)
                return
            log.warning(
                "journal: could not make %d writes together (%s); one by one", len(batch), exc
            )
            self._solo = len(batch)
            return
        self._made(batch, results)
        if observe is not None:
            self._observe(observe, len(batch), began)

    async def _one(self, queued: Queued) -> None:
        queued.attempts += 1
        observe = self._on_commit
        began = 0.0 if observe is None else time.perf_counter()
        try:
            (result,) = await self._store.write_batch([queued.write])
        except asyncio.CancelledError:
            self._made([queued])
            raise
        except Exception as exc:
            if isinstance(exc, LeaseLostError) or queued.attempts >= self._max_attempts:
                self._fail(queued.what, exc)
                return
            log.warning("journal: could not %s (%s); retrying", queued.what, exc)
            delay = self._retry_delay * 2 ** (queued.attempts - 1)
            await asyncio.sleep(min(1.0, delay))
            return
        self._made([queued], [result])
        if observe is not None:
            self._observe(observe, 1, began)

    @staticmethod
    def _observe(observe: Callable[[int, float], None], writes: int, began: float) -> None:
        """Tell the observer of a transaction made; one that fails is logged, never taken for
        a failed write (the writes are made: making them again would double them)."""
        try:
            observe(writes, time.perf_counter() - began)
        except Exception:
            log.exception("journal: the commit observer failed")

    def _made(self, writes: list[Queued], results: list[Any] | None = None) -> None:
        # (the writes are the queue's head: counted at once, then each one's outcome told)
        n = len(writes)
        popleft = self._queue.popleft
        for _ in range(n):
            popleft()
        self.made += n
        self._solo = max(0, self._solo - n)
        for i, queued in enumerate(writes):
            if queued.ends_turn:
                self.ended = True
            if results is not None and queued.done is not None:
                queued.done(results[i])

    def _fail(self, what: str, exc: Exception) -> None:
        self.failed = True
        self.clear()
        self._on_failure(what, exc)
