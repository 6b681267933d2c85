"""A tool step's results message, known as soon as its last call ends.

The loop sends a step's results message (``tool_results``) after every call of the step has
reported its end, and builds it from exactly those ends: one result per call, in the order of
the assistant message's tool_use blocks, with each call's final output and error flag. So the
journal can write the message in the same transaction as the last call's end instead of a
transaction of its own — nothing is shown in between: the end is made before ``send``
returns, and the message is durable before the ``tool_results`` event is even emitted, let
alone printed or sent to the next model request.

:class:`StepResults` follows one step: :meth:`expect` at the step's finished assistant
message, :meth:`ended` at each call's final state; the message comes out when the last call
ends. The journal compares it with the message the loop sends; if they ever differ (a result
built some other way), the stored one is replaced by the loop's, in place.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from drover.core.events import ToolStateChanged
from drover.core.messages import Message, ToolResultBlock, tool_result_message
from drover.journal.writes import AppendEvent, UpsertToolCall


def tool_call_write(
    event: ToolStateChanged,
    turn_id: str,
    step: int,
    read_only: bool,
    logged: dict[str, Any],
    row: AppendEvent | None = None,
) -> UpsertToolCall:
    """The write of a call's new state, with the input and output of its redacted log row
    (``logged``: they are redacted once); ``row``, that log row, to be logged with it."""
    return UpsertToolCall(
        turn_id=turn_id,
        call_id=event.call_id,
        call_index=event.call_index,
        name=event.name,
        state=event.state,
        input=logged.get("input"),
        output=logged.get("output"),
        is_error=event.is_error,
        outcome_unknown=event.outcome_unknown,
        read_only=read_only,
        step=step,
        logged=row,
    )


class StepResults:
    def __init__(self) -> None:
        self._order: tuple[str, ...] = ()
        # Each ended call's result as it happened and as stored (redacted).
        self._ends: dict[str, tuple[ToolResultBlock, ToolResultBlock]] = {}
        #: The results message written ahead, as stored (redacted), and its seq once stored.
        self.written: Message | None = None
        self.seq: int | None = None
        #: The message written ahead as built, before redaction: the loop's message equal to
        #: it is stored as ``written`` without being redacted again.
        self.built: Message | None = None

    def stored(self, seq: object) -> None:
        if isinstance(seq, int):
            self.seq = seq

    def take_written(self, message: Message) -> tuple[Message | None, Message | None, int | None]:
        """The results message written ahead, ``message`` as stored when it is the one
        written ahead (else None: to be redacted), and the seq; once."""
        out = (self.written, self.written if message == self.built else None, self.seq)
        self.written = self.built = self.seq = None
        return out

    def expect(self, message: Message) -> None:
        """A finished assistant message: its tool calls are the step's."""
        self._order = tuple(block.id for block in message.tool_uses)
        self._ends = {}

    def clear(self) -> None:
        self._order, self._ends = (), {}

    def ended(
        self, call_id: str, output: str | None, is_error: bool, stored: str | None
    ) -> Message | None:
        """A call's final state (``stored``: its output redacted); the step's results
        message, as stored, when it was the last to end (:attr:`built` as it happened)."""
        if call_id not in self._order or output is None or call_id in self._ends:
            return None
        block = ToolResultBlock(tool_use_id=call_id, content=output, is_error=is_error)
        as_stored = block if stored == output else replace(block, content=stored or "")
        self._ends[call_id] = (block, as_stored)
        if len(self._ends) < len(self._order):
            return None
        ends = [self._ends[c] for c in self._order]
        self.built = tool_result_message(raw for raw, _ in ends)
        message = tool_result_message(kept for _, kept in ends)
        self.clear()
        return message
