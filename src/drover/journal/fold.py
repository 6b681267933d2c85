"""Folding a finished step's coalesced text rows into one row per block, text by reference.

While an answer streams, each flush logs one coalesced ``text_delta`` row (its text, and the
marks where each live delta ends, so a replay can start after any delta). Once the step's
assistant message is stored, those rows hold nothing the message does not — but replay of the
finished turn must still serve every delta, at the same numbers. So in the message's own
transaction the rows of each text block are replaced by one row that covers the same numbers
with the same marks, and whose text is a reference to the message (``text_at``: the message's
seq in the turn, the block's index, the length) instead of a copy — resolved when the log is
read (:meth:`~drover.journal.protocol.EventLog.events_after`). An n-byte answer then costs the
message (n) and the marks (~0.5 n at 8-byte deltas), not n + 1.6 n of rows on top.

A block is folded only when that is exact: its rows are the only rows in their range of
numbers (nothing else of the log sits between them, so the one row does not change the order
a reader sees), and their text, concatenated, is the start of the message's block of the same
index (the redaction of the stream and of the message agree). Otherwise its rows stay.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import repeat
from operator import add
from typing import Any

from drover.core.messages import Message, TextBlock
from drover.journal.records import EventRecord

#: In a folded ``text_delta`` row, where its text is: ``[message seq, block index, length]``.
TEXT_AT = "text_at"


def folded_text(message: Message, ref: Sequence[Any]) -> str:
    """The text a ``text_at`` reference names in ``message`` ("" if it no longer fits)."""
    _, index, length = (int(x) for x in ref)
    if 0 <= index < len(message.content):
        block = message.content[index]
        if isinstance(block, TextBlock) and len(block.text) >= length:
            return block.text[:length]
    return ""


def fold_block(
    records: Sequence[EventRecord], message: Message, message_seq: int
) -> tuple[dict[str, Any], list[tuple[int, int]]] | None:
    """The payload and marks of the one row that replaces ``records`` (the rows of one block,
    in log order), or None when they cannot be folded exactly."""
    if len(records) < 1:
        return None
    first = records[0].payload
    index, step = first.get("index"), first.get("step")
    text_parts: list[str] = []
    marks: list[tuple[int, int]] = []
    offset = 0
    for record in records:
        payload = record.payload
        if payload.get("index") != index or payload.get("step") != step or TEXT_AT in payload:
            return None
        if record.marks is None or not isinstance(payload.get("text"), str):
            return None
        text = str(payload["text"])
        if offset == 0 or not record.marks:  # (the first row: its marks as they are)
            marks += record.marks
        else:
            seqs, ends = zip(*record.marks, strict=True)
            marks += zip(seqs, map(add, repeat(offset), ends), strict=True)
        text_parts.append(text)
        offset += len(text)
    text = "".join(text_parts)
    if not isinstance(index, int) or folded_text(message, [message_seq, index, len(text)]) != text:
        return None
    return {
        "type": "text_delta",
        TEXT_AT: [message_seq, index, len(text)],
        "index": index,
        "step": step,
    }, marks


def by_block(records: Sequence[EventRecord], step: int) -> dict[Any, list[EventRecord]]:
    """The step's coalesced text rows grouped by block, each group in log order."""
    out: dict[Any, list[EventRecord]] = {}
    for record in records:
        if record.type == "text_delta" and record.payload.get("step") == step:
            out.setdefault(record.payload.get("index"), []).append(record)
    return out


def resolved(payload: Mapping[str, Any], message: Message | None) -> dict[str, Any]:
    """A folded row's payload with its text in place (``text_at`` → ``text``)."""
    ref = payload[TEXT_AT]
    text = "" if message is None else folded_text(message, ref)
    return {
        ("text" if k == TEXT_AT else k): (text if k == TEXT_AT else v) for k, v in payload.items()
    }
