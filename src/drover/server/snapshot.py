"""The durable transcript of a session as JSON (``GET /v1/sessions/{id}`` and ``reset``).

It is read from the store, so it shows what survives a crash: turns with their status, their
messages (partial text included), each tool call in its latest state, and a running turn's
usage so far (``partial``), from its last ``usage`` event. ``last_event_id`` is the number
the snapshot is current to, exactly: everything is read in one snapshot of the journal
(:meth:`~drover.journal.protocol.SessionStore.transcript`), and the journal writes streamed
text in whole deltas, so the partial text runs to the end of the delta numbered
``last_event_id`` when that is a delta (or to an earlier one's), never into the middle of one.
A client that replays the events after it (``GET …/events?after=``) has everything, once.
"""

from __future__ import annotations

from typing import Any

from drover.core.messages import message_to_dict
from drover.journal.protocol import Store
from drover.journal.records import QueuedMessage, SessionRecord, ToolCallRecord, Transcript


def session_summary(record: SessionRecord, running_turn_id: str | None) -> dict[str, Any]:
    return {
        "id": record.id,
        "title": record.title,
        "model": record.model,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
        "running_turn_id": running_turn_id,
    }


def _call(call: ToolCallRecord) -> dict[str, Any]:
    return {
        "call_id": call.call_id,
        "step": call.step,
        "call_index": call.call_index,
        "name": call.name,
        "state": call.state,
        "input": None if call.input is None else dict(call.input),
        "output": call.output,
        "is_error": call.is_error,
        "outcome_unknown": call.outcome_unknown,
    }


def _turns(read: Transcript) -> list[dict[str, Any]]:
    calls: dict[str, list[dict[str, Any]]] = {}
    for call in read.tool_calls:
        calls.setdefault(call.turn_id, []).append(_call(call))
    turns = []
    for turn, stored in read.turns:
        messages = [
            {
                "seq": m.seq,
                "partial": m.partial,
                "message": message_to_dict(m.message, image_data=False),
            }
            for m in stored
        ]
        usage = turn.usage
        if usage is None:
            # What it used so far (a page reloaded mid-turn keeps showing it).
            usage = read.running_usage.get(turn.id)
        turns.append(
            {
                "id": turn.id,
                "seq": turn.seq,
                "status": turn.status,
                "reason": turn.reason,
                "error": turn.error,
                "discarded": turn.discarded,
                "rewound": turn.rewound,
                "created_at": turn.created_at,
                "ended_at": turn.ended_at,
                "usage": None if usage is None else usage.to_dict(),
                "user_message": (
                    None
                    if turn.user_message is None
                    else message_to_dict(turn.user_message, image_data=False)
                ),
                "messages": messages,
                "tool_calls": calls.get(turn.id, []),
            }
        )
    return turns


async def snapshot(
    store: Store,
    record: SessionRecord,
    *,
    running_turn_id: str | None,
    pending_permissions: list[dict[str, Any]],
) -> dict[str, Any]:
    read = await store.transcript(record.id)
    if read is None:  # (deleted meanwhile: what the caller found, empty)
        return {
            **session_summary(record, running_turn_id),
            "forked_from": record.forked_from,
            "forked_turn": record.forked_turn,
            "last_event_id": 0,
            "turns": [],
            "pending_permissions": pending_permissions,
            "queued": [],
        }
    fresh = read.session
    return {
        **session_summary(fresh, running_turn_id),
        "forked_from": fresh.forked_from,
        "forked_turn": fresh.forked_turn,
        "last_event_id": read.last_seq,
        "turns": _turns(read),
        "pending_permissions": pending_permissions,
        "queued": [_queued(m) for m in read.queued],
    }


def _queued(message: QueuedMessage) -> dict[str, Any]:
    return {"message_id": message.id, "content": message.content, "created_at": message.created_at}
