"""Rules every backend applies the same way, so that each store keeps the same record.

What an open tool call becomes when its turn is cut off, which turns may still be written,
how left-over streamed text becomes partial messages, a session's title, the form of a flushed
text row and of an event a store logs on its own, why a recovered turn ended, and the events
of a session's queued messages.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from itertools import groupby
from typing import Any

from drover.core.events import TextDelta, ToolState, event_to_dict, interrupted_outcome
from drover.core.messages import Message, TextBlock
from drover.errors import LeaseLostError
from drover.journal.records import EventRecord, QueuedMessage

#: Why a recovered turn ended.
ORPHAN_ERROR = "the process running this turn stopped before it finished"
#: The longest session title (the first user prompt, cut).
TITLE_CHARS = 80


def interrupted_call(state: ToolState, read_only: bool) -> tuple[str, bool]:
    """What an open tool call becomes when its turn is cut off: (result text, outcome unknown).
    One stored as ``running`` had its tool entered
    (:func:`~drover.core.events.interrupted_outcome`)."""
    return interrupted_outcome(state == "running", read_only)


def check_writable(turn_id: str, status: str, holder: str | None, owner: str | None) -> None:
    """Refuse a write to a turn that ended (or, with ``owner``, that another process holds)."""
    if status != "running":
        raise LeaseLostError(
            f"turn {turn_id} has already ended ({status}); another process may have recovered it"
        )
    if owner is not None and holder != owner:
        raise LeaseLostError(f"turn {turn_id} is held by another process ({holder})")


def partial_messages(deltas: Iterable[tuple[int, int, str]]) -> list[Message]:
    """The assistant messages rebuilt from text deltas ``(step, block_index, text)`` in
    order: one per step that holds text, its blocks marked partial."""
    out: list[Message] = []
    for _, rows in groupby(deltas, key=lambda d: d[0]):
        joined: dict[int, list[str]] = {}
        for _, index, text in rows:
            joined.setdefault(index, []).append(text)
        content = tuple(
            TextBlock(text=text, partial=True)
            for _, parts in sorted(joined.items())
            if (text := "".join(parts))
        )
        if content:
            out.append(Message(role="assistant", content=content))
    return out


def session_title(user_message: Message | None) -> str | None:
    if user_message is None:
        return None
    text = " ".join(user_message.text.split())
    if not text:
        return None
    return text if len(text) <= TITLE_CHARS else text[: TITLE_CHARS - 1] + "…"


#: The longest title a user may give a session.
MAX_TITLE_CHARS = 200


def user_title(text: str) -> str:
    """A title the user gave, on one line; ``ValueError`` (its message says why) when it is
    empty or longer than :data:`MAX_TITLE_CHARS`."""
    title = " ".join(text.split())
    if not title:
        raise ValueError("a title cannot be empty")
    if len(title) > MAX_TITLE_CHARS:
        raise ValueError(f"a title is at most {MAX_TITLE_CHARS} characters ({len(title)} given)")
    return title


def flushed_text_event(text: str, index: int, step: int) -> dict[str, Any]:
    """The coalesced ``text_delta`` event a flush of streamed text logs: the live delta's form
    and the step it belongs to (a replay drops a step's text on a discarding retry)."""
    return {**event_to_dict(TextDelta(text=text, index=index)), "step": step}


def logged_event(
    session_id: str, seq: int, turn_id: str | None, event: Mapping[str, Any], now: float
) -> EventRecord:
    """The record of an event a store just logged on its own (one number)."""
    payload = dict(event)
    return EventRecord(
        session_id=session_id,
        seq=seq,
        turn_id=turn_id,
        type=str(payload["type"]),
        payload=payload,
        created_at=now,
        last_seq=seq,
    )


def queued_event(message: QueuedMessage) -> dict[str, Any]:
    """The event that says a message was queued (``message_queued``)."""
    return {"type": "message_queued", "message_id": message.id, "content": message.content}


def cancelled_event(message_id: str) -> dict[str, Any]:
    """The event that says a queued message was cancelled (``message_cancelled``)."""
    return {"type": "message_cancelled", "message_id": message_id}


def rewound_event(turn_ids: list[str]) -> dict[str, Any]:
    """The event that says a rewind undid the turns ``turn_ids`` (``turns_rewound``): the
    session's history goes on from before the first of them."""
    return {"type": "turns_rewound", "turn_ids": turn_ids}


def started_event(message_id: str, turn_id: str) -> dict[str, Any]:
    """The event that says turn ``turn_id`` runs the queued message (``message_started``)."""
    return {"type": "message_started", "message_id": message_id, "turn_id": turn_id}
