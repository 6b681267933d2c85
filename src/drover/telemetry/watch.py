"""How the runner observes a turn and a recovery, given a :class:`~drover.telemetry.Telemetry`.

:class:`TurnWatch` is made per turn, before the turn is recorded: its live event sinks (the
turn's spans when traces are on, its metrics when kept) go next to the caller's; once the turn
is recorded it keeps the turn's ``traceparent`` in the journal and links the turn to the span
of the turn it continues. :func:`watch_recovery` records the turns of dead processes this one
ended. Neither ever fails a turn: a store that cannot keep or give a traceparent is logged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from drover.core.sinks import EventSink
from drover.journal.protocol import Store
from drover.journal.redact import Redactor
from drover.store.sql.turn_traces import TurnTraces
from drover.telemetry.logs import TurnLog
from drover.telemetry.setup import Telemetry

if TYPE_CHECKING:
    from drover.telemetry.tracing import TurnTrace

log = logging.getLogger(__name__)

#: The instrumentation scope of drover's spans.
SCOPE = "drover"


class TurnWatch:
    """What observes one turn (see the module docstring)."""

    def __init__(
        self,
        telemetry: Telemetry,
        *,
        session_id: str,
        protocol: str,
        model: str,
        max_tokens: int | None,
        redactor: Redactor,
    ) -> None:
        self.session_id = session_id
        self.trace: TurnTrace | None = None
        sinks: list[EventSink] = []
        if telemetry.tracer_provider is not None:
            from opentelemetry import context

            from drover.telemetry.tracing import TurnTrace

            # The parent is the context the turn was started in (the turn's task copied it):
            # the HTTP request's traceparent, or a library caller's own span.
            self.trace = TurnTrace(
                telemetry.tracer_provider.get_tracer(SCOPE),
                session_id=session_id,
                protocol=protocol,
                model=model,
                max_tokens=max_tokens,
                redactor=redactor,
                capture_content=telemetry.capture_content,
                parent=context.get_current(),
            )
            sinks.append(self.trace)
        if telemetry.metrics is not None:
            sinks.append(telemetry.metrics.turn_sink(protocol, model))
        self.sinks: tuple[EventSink, ...] = tuple(sinks)

    async def began(self, store: Store, turn_id: str, continues: str | None) -> None:
        """The turn was recorded as ``turn_id``: keep its traceparent, and link it to the span
        of the turn ``continues`` names (the one whose unfinished work it goes on with)."""
        trace = self.trace
        if trace is None:
            return
        trace.began(turn_id)
        if not isinstance(store, TurnTraces):
            return
        try:
            if continues is not None:
                previous = await store.turn_trace(continues)
                if previous is not None:
                    trace.link(previous, continues)
            traceparent = trace.traceparent
            if traceparent is not None:
                await store.record_turn_trace(turn_id, traceparent)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("could not keep the trace of turn %s: %s", turn_id, exc)

    def log_fields(self, turn_id: str) -> TurnLog:
        ids = None if self.trace is None else self.trace.ids()
        if ids is None:
            return TurnLog(self.session_id, turn_id)
        return TurnLog(self.session_id, turn_id, *ids)

    def abandon(self, why: BaseException) -> None:
        if self.trace is not None:
            self.trace.abandon(why)

    def close(self) -> None:
        if self.trace is not None:
            self.trace.close()


async def watch_recovery(telemetry: Telemetry, store: Store, found: Mapping[str, str]) -> None:
    """Record the turns ``found`` (``{turn_id: session_id}``) that this process ended for dead
    ones: the takeover counter, and with traces a span each, child of the dead turn's."""
    if not found:
        return
    if telemetry.metrics is not None:
        telemetry.metrics.takeovers.inc(len(found))
    provider = telemetry.tracer_provider
    if provider is None:
        return
    from drover.telemetry.tracing import recovery_span

    tracer = provider.get_tracer(SCOPE)
    for turn_id, session_id in found.items():
        try:
            traceparent = None
            if isinstance(store, TurnTraces):
                traceparent = await store.turn_trace(turn_id)
            calls = [c for c in await store.tool_calls(turn_id) if c.state == "interrupted"]
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("could not trace the recovery of turn %s: %s", turn_id, exc)
            continue
        recovery_span(
            tracer,
            turn_id=turn_id,
            session_id=session_id,
            traceparent=traceparent,
            calls=calls,
        )
