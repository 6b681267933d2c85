"""Where a turn's span is: the W3C ``traceparent`` of each turn run with traces on.

The runner records it once the turn is begun; the process that recovers the turn after a
crash, or the turn that continues its work, reads it back to link its own spans to it (see
:mod:`drover.telemetry.tracing`). One row per turn in ``turn_traces``, deleted with its turn.
Self-contained on purpose: :class:`TurnTraceRows` is mixed into the SQL store and needs only
its ``_perform``/``_select`` plumbing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from drover.store.dialect import Plan, Row, execute

#: The longest traceparent kept (the W3C form is 55 characters).
_MAX = 128


@runtime_checkable
class TurnTraces(Protocol):
    async def record_turn_trace(self, turn_id: str, traceparent: str) -> None:
        """Keep the traceparent of the turn's span (a second call replaces it)."""
        ...

    async def turn_trace(self, turn_id: str) -> str | None:
        """The traceparent kept for the turn, if any."""
        ...


class TurnTraceRows:
    """:class:`TurnTraces` on the SQL store's plans."""

    if TYPE_CHECKING:  # (the SQL store's own)
        _clock: Callable[[], float]

        async def _perform(self, plan: Plan[Any], mode: Any) -> Any: ...

        async def _select(self, sql: str, *params: Any) -> list[Row]: ...

    async def record_turn_trace(self, turn_id: str, traceparent: str) -> None:
        if len(traceparent) > _MAX:
            raise ValueError("not a traceparent: too long")
        await self._perform(
            execute(
                "INSERT INTO turn_traces (turn_id, traceparent, created_at) VALUES (?, ?, ?) "
                "ON CONFLICT (turn_id) DO UPDATE SET traceparent = excluded.traceparent",
                turn_id,
                traceparent,
                self._clock(),
            ),
            "write",
        )

    async def turn_trace(self, turn_id: str) -> str | None:
        found = await self._select("SELECT traceparent FROM turn_traces WHERE turn_id = ?", turn_id)
        return str(found[0]["traceparent"]) if found else None
