"""Where a worker's journal writes: the parent turn's event log and tool calls.

A worker (a sub-agent the ``task`` tool runs, see :mod:`drover.runtime.workers`) is recorded by a
:class:`~drover.journal.journal.Journal` of its own — same gates, same redaction, same retries —
whose store is a :class:`WorkerLog`. It keeps the worker under the parent's turn without a
table of its own:

* the worker's tool calls are ordinary tool calls of the parent turn, closed like any other
  when the turn ends or is recovered; their ``call_index`` is already relabelled
  ``worker * 100 + index`` and their id is scoped by :func:`scoped_call_id` (servers that
  number calls ``call_0``, ``call_1``… would otherwise give two workers the same ids);
* everything else — its prompt, flushed text, messages, retries, its end — is an event of the
  session's log, in the form of :class:`~drover.core.events.WorkerEvent`: type ``worker``, with
  ``worker``, ``parent_call_id`` and the worker's own event under ``event``. The messages are
  recorded by their ``assistant_message``/``tool_results`` events, so a message's own write
  stores nothing more; flushed text is a ``text_delta`` event with its ``step``; the
  worker's terminal event is logged as is (the parent turn's row is not touched).

:func:`drover.runtime.workers.worker_states` rebuilds each worker's work from these events.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from drover.journal.protocol import TurnJournal
from drover.journal.rules import flushed_text_event
from drover.journal.writes import (
    AppendEvent,
    AppendMessage,
    AppendPartialText,
    DiscardPartialText,
    EndTurn,
    JournalWrite,
    KeepFileImage,
    ReplaceMessage,
    UpsertToolCall,
    with_message,
)


def scoped_call_id(parent_call_id: str, worker: int, call_id: str) -> str:
    """The id under which a worker's tool call is stored."""
    return f"{worker_call_prefix(parent_call_id, worker)}{call_id}"


def worker_call_prefix(parent_call_id: str, worker: int) -> str:
    return f"{parent_call_id}/{worker}/"


class WorkerLog(TurnJournal):
    """The :class:`~drover.journal.protocol.TurnJournal` a worker's journal writes through,
    over its parent's (see the module docstring)."""

    def __init__(self, store: TurnJournal, session_id: str, call_id: str, worker: int) -> None:
        self.store = store
        self.session_id = session_id
        self.call_id = call_id
        self.worker = worker

    async def write_batch(self, writes: Sequence[JournalWrite]) -> list[Any]:
        """The worker's writes as the parent's, made in one batch of the parent's store; what
        each gives back as the parent's would (a message's seq: 0, it is not stored)."""
        made: list[JournalWrite] = []
        # Per write: the index of the parent's write whose result is its own (None: a value).
        results: list[int | None] = []
        values: list[Any] = []
        for write in writes:
            mine = self._as_parents(write)
            if isinstance(mine, tuple):
                results.append(None)
                value, rows = mine
                values.append(value)
                made += rows
            else:
                results.append(len(made))
                values.append(None)
                made.append(mine)
        done = await self.store.write_batch(made) if made else []
        return [v if i is None else done[i] for i, v in zip(results, values, strict=True)]

    def _as_parents(self, write: JournalWrite) -> JournalWrite | tuple[Any, list[JournalWrite]]:
        """The parent's write that stands for ``write`` (its result is ``write``'s), or what
        ``write`` gives back and the parent's writes it makes."""
        match write:
            case AppendEvent():
                return replace(write, event=self._tagged(write.event))
            case UpsertToolCall():
                scoped = scoped_call_id(self.call_id, self.worker, write.call_id)
                return replace(write, call_id=scoped)
            case AppendPartialText():
                # One row for the flush, covering the numbers of its live deltas (no marks: a
                # replay that starts inside it is reset rather than cut).
                event = flushed_text_event(write.text, write.block_index, write.step)
                return AppendEvent(
                    self.session_id, write.turn_id, self._tagged(event), write.seq, write.last_seq
                )
            case AppendMessage():
                # Recorded by the assistant_message / tool_results event the journal logs with
                # it (the row carrying it, when there is one, with the message in place).
                row = write.logged
                if row is None:
                    return 0, []
                event = self._tagged(with_message(row.event, write.message))
                return 0, [AppendEvent(row.session_id, row.turn_id, event, row.seq, row.last_seq)]
            case ReplaceMessage() | DiscardPartialText():
                # No message is stored to replace; a retry's event tells a reader to drop the
                # step's text.
                return None, []
            case KeepFileImage():
                return write  # a file a worker writes is the parent turn's to undo
            case EndTurn():
                # A worker's journal logs its end as an event (the parent's turn goes on).
                raise TypeError("a worker does not end its parent's turn")

    def _tagged(self, event: Mapping[str, Any]) -> dict[str, Any]:
        return worker_event(self.call_id, self.worker, event)


def worker_event(parent_call_id: str, worker: int, event: Mapping[str, Any]) -> dict[str, Any]:
    """An event of worker ``worker`` of call ``parent_call_id``, as the session's log and the
    live stream carry it."""
    return {
        "type": "worker",
        "worker": worker,
        "parent_call_id": parent_call_id,
        "event": dict(event),
    }
