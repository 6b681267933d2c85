"""The collector's settings for a long-running server process.

CPython's cyclic collector walks every container object of a generation when it collects it.
A server that has imported the provider SDKs (their pydantic schemas), the store and the app
holds a few hundred thousand such objects that never die, and every full collection walked
them all: under 250 concurrent streams, full collections of 0.2–0.8 s stopped the event loop,
which is every live delta's delay (``bench/server_load.py``; see bench/README.md).

:func:`settle` freezes what exists (``gc.freeze``: those objects are never examined again)
— without a collection first: one at that point found nothing to free among ~215,000
objects and cost ~130 ms of every start — and raises the first generation's threshold so
that the many short-lived objects of a streamed delta (SDK models, events, frames) are
mostly freed by reference counting before a collection would look at them. Cycles are
still collected.
"""

from __future__ import annotations

import gc

#: Allocations (net of deallocations) between two young collections (CPython's default: 700).
YOUNG_THRESHOLD = 20_000


def settle() -> None:
    """Call once the process has built everything it keeps (before serving)."""
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
