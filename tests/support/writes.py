"""The journal's writes one at a time, for tests that set a store up by hand.

A store's only write entry point is ``write_batch`` (a list of write values, one transaction).
Each function here makes one write through it — the value built from the arguments it is
given, by the name of the write — and gives back what that write gives back.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from drover.core.messages import Message
from drover.journal.protocol import TurnJournal
from drover.journal.records import EventRecord
from drover.journal.writes import (
    AppendEvent,
    AppendMessage,
    AppendPartialText,
    DiscardPartialText,
    EndTurn,
    JournalWrite,
    ReplaceMessage,
    UpsertToolCall,
)


async def write(store: TurnJournal, value: JournalWrite) -> Any:
    """Make one write; what it gives back."""
    return (await store.write_batch([value]))[0]


async def append_message(
    store: TurnJournal,
    turn_id: str,
    message: Message,
    *,
    partial: bool = False,
    step: int | None = None,
) -> int:
    return int(await write(store, AppendMessage(turn_id, message, partial, step)))


async def replace_message(
    store: TurnJournal, turn_id: str, seq: int | None, message: Message
) -> None:
    await write(store, ReplaceMessage(turn_id, seq, message))


async def append_partial_text(
    store: TurnJournal, turn_id: str, step: int, block_index: int, text: str, **numbers: Any
) -> int:
    return int(await write(store, AppendPartialText(turn_id, step, block_index, text, **numbers)))


async def discard_partial_text(store: TurnJournal, turn_id: str, step: int) -> None:
    await write(store, DiscardPartialText(turn_id, step))


async def upsert_tool_call(store: TurnJournal, turn_id: str, call_id: str, **fields: Any) -> None:
    await write(store, UpsertToolCall(turn_id=turn_id, call_id=call_id, **fields))


async def append_event(
    store: TurnJournal,
    session_id: str,
    turn_id: str | None,
    event: Mapping[str, Any],
    **numbers: Any,
) -> int:
    return int(await write(store, AppendEvent(session_id, turn_id, event, **numbers)))


async def end_turn(
    store: TurnJournal, turn_id: str, status: Any, **fields: Any
) -> list[EventRecord]:
    logged: list[EventRecord] = await write(
        store, EndTurn(turn_id=turn_id, status=status, **fields)
    )
    return logged
