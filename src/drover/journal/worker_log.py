"""Where a worker's journal writes: the parent turn's event log and tool calls.

A worker (a sub-agent the ``task`` tool runs, see :mod:`drover.workers`) is recorded by a
:class:`~drover.journal.journal.Journal` of its own — same gates, same redaction, same retries —
whose store is a :class:`WorkerLog`. It keeps the worker under the parent's turn without a
table of its own:

* the worker's tool calls are ordinary tool calls of the parent turn, closed like any other
  when the turn ends or is recovered; their ``call_index`` is already relabelled
  ``worker * 100 + index`` and their id is scoped by :func:`scoped_call_id` (servers that
  number calls ``call_0``, ``call_1``… would otherwise give two workers the same ids);
* everything else — its prompt, flushed text, messages, retries, its end — is an event of the
  session's log, in the form of :class:`~drover.events.WorkerEvent`: type ``worker``, with
  ``worker``, ``parent_call_id`` and the worker's own event under ``event``. The messages are
  recorded by their ``assistant_message``/``tool_results`` events, so ``append_message``
  writes nothing more; flushed text is a ``text_delta`` event with its ``step``; the
  worker's terminal event is logged as is (the parent turn's row is not touched).

:func:`drover.workers.worker_states` rebuilds each worker's work from these events.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from drover.events import ToolState, TurnStatus
from drover.journal.protocol import TurnJournal
from drover.journal.records import EventRecord
from drover.journal.rules import flushed_text_event
from drover.messages import Message, Usage


def scoped_call_id(parent_call_id: str, worker: int, call_id: str) -> str:
    """The id under which a worker's tool call is stored."""
    return f"{worker_call_prefix(parent_call_id, worker)}{call_id}"


def worker_call_prefix(parent_call_id: str, worker: int) -> str:
    return f"{parent_call_id}/{worker}/"


class WorkerLog(TurnJournal):
    """The :class:`~drover.journal.protocol.TurnJournal` a worker's journal writes through, over its
    parent's (see the module docstring)."""

    def __init__(self, store: TurnJournal, session_id: str, call_id: str, worker: int) -> None:
        self.store = store
        self.session_id = session_id
        self.call_id = call_id
        self.worker = worker

    def _tagged(self, event: Mapping[str, Any]) -> dict[str, Any]:
        return worker_event(self.call_id, self.worker, event)

    async def append_event(
        self,
        session_id: str,
        turn_id: str | None,
        event: Mapping[str, Any],
        *,
        seq: int | None = None,
        last_seq: int | None = None,
    ) -> int:
        return await self.store.append_event(
            session_id, turn_id, self._tagged(event), seq=seq, last_seq=last_seq
        )

    async def append_message(
        self, turn_id: str, message: Message, *, partial: bool = False, step: int | None = None
    ) -> int:
        # Recorded by the assistant_message / tool_results event the journal logs next.
        return 0

    async def append_partial_text(
        self,
        turn_id: str,
        step: int,
        block_index: int,
        text: str,
        *,
        seq: int | None = None,
        last_seq: int | None = None,
        marks: Sequence[tuple[int, int]] | None = None,
    ) -> int:
        # One row for the flush, covering the numbers of its live deltas (no marks: a replay
        # that starts inside it is reset rather than cut).
        event = flushed_text_event(text, block_index, step)
        return await self.append_event(self.session_id, turn_id, event, seq=seq, last_seq=last_seq)

    async def discard_partial_text(self, turn_id: str, step: int) -> None:
        # The retry event logged with it tells a reader to drop the step's text.
        return None

    async def upsert_tool_call(
        self,
        turn_id: str,
        call_id: str,
        *,
        call_index: int,
        name: str,
        state: ToolState,
        input: Mapping[str, Any] | None = None,
        output: str | None = None,
        is_error: bool = False,
        outcome_unknown: bool = False,
        read_only: bool = False,
        step: int = 0,
    ) -> None:
        await self.store.upsert_tool_call(
            turn_id,
            scoped_call_id(self.call_id, self.worker, call_id),
            call_index=call_index,
            name=name,
            state=state,
            input=input,
            output=output,
            is_error=is_error,
            outcome_unknown=outcome_unknown,
            read_only=read_only,
            step=step,
        )

    async def end_turn(
        self,
        turn_id: str,
        status: TurnStatus,
        *,
        reason: str | None = None,
        error: str | None = None,
        usage: Usage | None = None,
        owner: str | None = None,
        event: Mapping[str, Any] | None = None,
        first_seq: int | None = None,
    ) -> list[EventRecord]:
        # Never called: a worker's journal logs its end as an event (the parent's turn goes on).
        raise TypeError("a worker does not end its parent's turn")


def worker_event(parent_call_id: str, worker: int, event: Mapping[str, Any]) -> dict[str, Any]:
    """An event of worker ``worker`` of call ``parent_call_id``, as the session's log and the
    live stream carry it."""
    return {
        "type": "worker",
        "worker": worker,
        "parent_call_id": parent_call_id,
        "event": dict(event),
    }
