"""Where a turn's span is: the W3C ``traceparent`` of each turn run with traces on.

The runner records it once the turn is begun; the process that recovers the turn after a
crash, or the turn that continues its work, reads it back to link its own spans to it (see
:mod:`drover.telemetry.tracing`). One row per turn in ``turn_traces``, deleted with its turn.
A store that keeps them satisfies :class:`TurnTraces` (the SQL store does, with the plans
below); one that does not is traced without the links.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from drover.store.sql.plan import Plan, execute, rows

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


def record_turn_trace(turn_id: str, traceparent: str, now: float) -> Plan[None]:
    if len(traceparent) > _MAX:
        raise ValueError("not a traceparent: too long")
    yield from execute(
        "INSERT INTO turn_traces (turn_id, traceparent, created_at) VALUES (?, ?, ?) "
        "ON CONFLICT (turn_id) DO UPDATE SET traceparent = excluded.traceparent",
        turn_id,
        traceparent,
        now,
    )


def turn_trace(turn_id: str) -> Plan[str | None]:
    found = yield from rows("SELECT traceparent FROM turn_traces WHERE turn_id = ?", turn_id)
    return str(found[0]["traceparent"]) if found else None
