"""The durable transcript of a session as JSON (``GET /v1/sessions/{id}`` and ``reset``).

It is read from the store, so it shows what survives a crash: turns with their status, their
messages (partial text included), each tool call in its latest state, and a running turn's
usage so far (``partial``), from its last ``usage`` event. ``last_event_id`` is
the number the snapshot is current to; it is read before and after the transcript and the read
repeated when a write slipped in between, so the two agree.
"""

from __future__ import annotations

from typing import Any

from drover.journal.protocol import Store
from drover.journal.records import QueuedMessage, SessionRecord, ToolCallRecord
from drover.messages import message_to_dict

#: Reads of a session being written before the snapshot is taken as it is.
_ATTEMPTS = 5


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


async def _transcript(store: Store, session_id: str) -> list[dict[str, Any]]:
    calls: dict[str, list[dict[str, Any]]] = {}
    for call in await store.tool_calls(session_id=session_id):
        calls.setdefault(call.turn_id, []).append(_call(call))
    turns = []
    for turn in await store.turns(session_id):
        messages = [
            {
                "seq": m.seq,
                "partial": m.partial,
                "message": message_to_dict(m.message, image_data=False),
            }
            for m in await store.turn_messages(turn.id)
        ]
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
                "usage": None if turn.usage is None else turn.usage.to_dict(),
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
    last = await store.last_event_seq(record.id)
    for _ in range(_ATTEMPTS):
        turns = await _transcript(store, record.id)
        queued = [_queued(m) for m in await store.queued_messages(record.id)]
        now = await store.last_event_seq(record.id)
        if now == last:
            break
        last = now
    for turn in turns:
        if turn["status"] == "running" and turn["usage"] is None:
            # What it used so far (a page reloaded mid-turn keeps showing it).
            so_far = await store.running_usage(record.id, turn["id"])
            turn["usage"] = None if so_far is None else so_far.to_dict()
    fresh = await store.get_session(record.id) or record
    return {
        **session_summary(fresh, running_turn_id),
        "forked_from": fresh.forked_from,
        "forked_turn": fresh.forked_turn,
        "last_event_id": last,
        "turns": turns,
        "pending_permissions": pending_permissions,
        "queued": queued,
    }


def _queued(message: QueuedMessage) -> dict[str, Any]:
    return {"message_id": message.id, "content": message.content, "created_at": message.created_at}
