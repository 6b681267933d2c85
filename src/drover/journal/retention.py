"""Retention: which sessions the journal lets go, and pruning them in bounded batches.

A session is pruned when it was last updated more than ``older_than`` seconds ago, is not
among the ``keep_last`` most recently updated sessions of the journal, and has no ``running``
turn (checked in the transaction that deletes it: a running session is never pruned). Its
turns, messages, tool calls, streamed text, events and grants go with it. Webhook deliveries
done or given up before the cut-off are pruned too.

:func:`prune` deletes batch after batch (each one short transaction, see
:meth:`~drover.journal.protocol.Retention.prune_batch`) until a batch finds fewer than its
limit, then gives the freed space back the same way
(:meth:`~drover.journal.protocol.Retention.reclaim_space`). Each transaction is sized to take
about :data:`STEP_SECONDS` and is followed by a pause of :data:`GAP_SECONDS`: on
SQLite a transaction holds the journal's write lock, and a live turn's writer in another
process polls for it (SQLite's busy handler, at most 100 ms apart) — without pauses a prune
that took the lock back at once would starve it until its busy timeout failed the write.
``drover gc`` runs it once; ``drover serve`` runs it on a schedule (the ``[retention]`` config).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from drover.journal.protocol import Retention

log = logging.getLogger(__name__)

#: Sessions the first batch deletes, and free pages the first reclaim gives back; later
#: ones grow or shrink (see :class:`_Sizer`) so that each transaction takes about
#: STEP_SECONDS.
BATCH = 50
RECLAIM_PAGES = 500
STEP_SECONDS = 0.15
#: The pause after each transaction (see the module docstring).
GAP_SECONDS = 0.11


class _Sizer:
    """The size of the next transaction's work: doubled after one that took less than half
    of :data:`STEP_SECONDS`, halved after one that took more than twice that; ``fixed``
    keeps it."""

    def __init__(self, first: int, fixed: bool) -> None:
        self.size = first
        self._fixed = fixed
        self._least, self._most = max(first // 20, 1), first * 40

    def took(self, seconds: float) -> None:
        if self._fixed:
            return
        if seconds < STEP_SECONDS / 2:
            self.size = min(self.size * 2, self._most)
        elif seconds > STEP_SECONDS * 2:
            self.size = max(self.size // 2, self._least)


@dataclass(frozen=True, slots=True)
class Policy:
    """What to keep: sessions updated within ``older_than`` seconds, and the ``keep_last``
    most recently updated whatever their age."""

    older_than: float
    keep_last: int = 0


@dataclass(slots=True)
class PruneReport:
    """What a prune deleted (or, dry, would delete), and the journal's size around it."""

    sessions: int = 0
    turns: int = 0
    events: int = 0
    deliveries: int = 0
    batches: int = 0
    seconds: float = 0.0
    bytes_before: int = 0
    bytes_after: int = 0
    #: Free space left inside the journal after it (SQLite without incremental vacuum).
    free_after: int = 0
    dry_run: bool = False

    def describe(self) -> str:
        verb = "would delete" if self.dry_run else "deleted"
        line = (
            f"{verb} {self.sessions} session(s), {self.turns} turn(s), {self.events} event "
            f"row(s), {self.deliveries} webhook delivery row(s)"
        )
        if not self.dry_run:
            line += (
                f" in {self.seconds:.2f} s ({self.batches} batch(es)); journal "
                f"{_size(self.bytes_before)} -> {_size(self.bytes_after)}"
            )
            if self.free_after:
                line += f" ({_size(self.free_after)} free inside it, reused by later writes)"
        return line


def _size(count: int) -> str:
    return f"{count / 1_000_000:.1f} MB" if count >= 100_000 else f"{count / 1000:.1f} kB"


async def prune(
    store: Retention,
    policy: Policy,
    *,
    dry_run: bool = False,
    batch: int | None = None,
    gap: float = GAP_SECONDS,
    clock: Callable[[], float] = time.time,
) -> PruneReport:
    """Prune what ``policy`` lets go (``dry_run``: only count it); ``batch`` fixes the size of
    every batch (None: sized as the module docstring says); ``gap`` is the pause after each
    transaction."""
    cutoff = clock() - policy.older_than
    report = PruneReport(dry_run=dry_run)
    if dry_run:
        seen = await store.prune_preview(cutoff, policy.keep_last)
        report.sessions, report.turns = seen.sessions, seen.turns
        report.events, report.deliveries = seen.events, seen.deliveries
        return report
    report.bytes_before = (await store.journal_bytes())[0]
    started = time.perf_counter()
    sizer = _Sizer(batch or BATCH, fixed=batch is not None)
    while True:
        limit = sizer.size
        begun = time.perf_counter()
        done = await store.prune_batch(cutoff, policy.keep_last, limit)
        report.batches += 1
        report.sessions += done.sessions
        report.turns += done.turns
        report.events += done.events
        report.deliveries += done.deliveries
        if done.sessions < limit and done.deliveries < limit:
            break
        await _pause(sizer, time.perf_counter() - begun, gap)
    sizer = _Sizer(RECLAIM_PAGES, fixed=False)
    while True:
        begun = time.perf_counter()
        if not await store.reclaim_space(sizer.size):
            break
        await _pause(sizer, time.perf_counter() - begun, gap)
    report.seconds = time.perf_counter() - started
    report.bytes_after, report.free_after = await store.journal_bytes()
    return report


async def _pause(sizer: _Sizer, took: float, gap: float) -> None:
    """After a transaction that took ``took`` seconds: size the next, then let others write."""
    sizer.took(took)
    await asyncio.sleep(gap)


async def keep(store: Retention, policy: Policy, every: float) -> None:
    """Run until cancelled: a prune now, then one every ``every`` seconds (``drover serve``'s
    ``[retention]``). A failed prune is logged and tried again at the next time."""
    while True:
        try:
            report = await prune(store, policy)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("retention: prune failed (%s); next try in %g s", exc, every)
        else:
            if report.sessions or report.deliveries:
                log.info("retention: %s", report.describe())
        await asyncio.sleep(every)
