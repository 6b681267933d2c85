"""Group commit in the SQL journal: a batch of the journal's writes as one plan.

:func:`batch` makes a list of writes (:mod:`drover.journal.writes`) in order in one
transaction: every write as its own plan would (:func:`write_plan`), except what is made
together (:func:`together`) — the states of one tool call become one write of its row, and log
rows the journal numbered one after the other are inserted by one statement. The batch's first
write of a running turn checks and locks that turn (and its session) once for every write.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, TypeAlias, cast

from drover.core.events import TERMINAL_TOOL_STATES
from drover.core.messages import TextBlock, ToolResultBlock
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
)
from drover.store.sql.common import Held, turn_session
from drover.store.sql.dialect import Dialect
from drover.store.sql.files import keep_file_image
from drover.store.sql.log import append_event, append_numbered
from drover.store.sql.plan import Plan
from drover.store.sql.text import FreedSpace, append_partial_text, discard
from drover.store.sql.turns import end_turn
from drover.store.sql.work import append_message, replace_message, upsert_call

#: Characters a batch stores (counted by :func:`together`) above which it is a ``bulk``
#: write: made on the store's own thread, not its caller's. The final write of a 100 KB answer
#: (the message, and the fold of its ~1,000 text rows) takes ~40 ms, which no event loop
#: should stall for.
BULK_CHARS = 32 * 1024

#: How a batch's writes are made (see :func:`together`): by index, a write made in place of
#: the batch's (None: none) and, where numbered log rows run one after another, the end of
#: the run; and about how many characters the batch stores.
Together: TypeAlias = tuple[dict[int, "UpsertToolCall | None"], dict[int, int], int]


def together(writes: Sequence[JournalWrite]) -> Together:
    """The writes of a batch made together (one pass over the batch).

    The states of one call written twice or more become one write of its row: the last,
    with what it leaves of the earlier ones, makes the row they would together (a call's
    row holds its latest state only, and nothing in a batch but the end of the turn reads
    the table). Only a state that is not terminal is folded into a later one (after a
    terminal state the later write is refused), and never across the end of the turn.

    Log rows the journal numbered, two or more one after the other, are logged together
    (:func:`~drover.store.sql.log.append_numbered`).

    The characters counted are a message's text and results, partial text and a call's
    output: what the time of the batch's transaction grows with."""
    merged: dict[int, UpsertToolCall | None] = {}
    runs: dict[int, int] = {}
    last: dict[tuple[str, str], tuple[int, UpsertToolCall]] = {}
    chars = 0
    run = -1  # where the current run of numbered log rows began
    for i, write in enumerate(writes):
        kind = type(write)
        if kind is AppendEvent and cast(AppendEvent, write).seq is not None:
            if run < 0:
                run = i
            continue
        if i - run > 1 and run >= 0:
            runs[run] = i
        run = -1
        if kind is UpsertToolCall:
            call = cast(UpsertToolCall, write)
            chars += len(call.output or "")
            key = (call.turn_id, call.call_id)
            earlier = last.get(key)
            if earlier is not None and earlier[1].state not in TERMINAL_TOOL_STATES:
                j, first = earlier
                merged[j] = None
                call = merged[i] = _then(first, call)
            last[key] = (i, call)
        elif kind is AppendMessage or kind is ReplaceMessage:
            for block in cast(AppendMessage | ReplaceMessage, write).message.content:
                if type(block) is TextBlock:
                    chars += len(block.text)
                elif type(block) is ToolResultBlock:
                    chars += len(block.content)
        elif kind is AppendPartialText:
            chars += len(cast(AppendPartialText, write).text)
        elif kind is KeepFileImage:
            chars += len(cast(KeepFileImage, write).before or b"")
        elif kind is EndTurn:
            last.clear()
    if run >= 0 and len(writes) - run > 1:
        runs[run] = len(writes)
    return merged, runs, chars


def _then(first: UpsertToolCall, then: UpsertToolCall) -> UpsertToolCall:
    """What the upsert of ``first`` (not terminal), then of ``then``, leaves in the call's row,
    as one write: ``then``'s state, with ``first``'s step, input and output where ``then``
    keeps the row's, and read-only when either says so."""
    return replace(
        then,
        input=then.input if then.input is not None else first.input,
        output=then.output if then.output is not None else first.output,
        read_only=then.read_only or first.read_only,
        step=then.step if then.step > 0 else first.step,
    )


def batch(
    d: Dialect,
    space: FreedSpace,
    writes: Sequence[JournalWrite],
    now: float,
    made: Together,
) -> Plan[list[Any]]:
    """``writes`` in order, in the transaction the plan runs in, made as ``made``
    (:func:`together`) says; what each gives back."""
    merged, runs, _ = made
    held = Held()
    yield from _check_first_turn(d, writes, held)
    out: list[Any] = []
    i, n = 0, len(writes)
    while i < n:
        end = runs.get(i)
        if end is not None:
            numbered = cast(Sequence[AppendEvent], writes[i:end])
            out += yield from append_numbered(d, numbered, now, held)
            i = end
            continue
        write = merged.get(i, writes[i]) if merged else writes[i]
        if write is None:  # made by a later write of the same call
            out.append(None)
        else:
            out.append((yield from write_plan(d, space, write, now, held)))
        i += 1
    return out


def _check_first_turn(d: Dialect, writes: Sequence[JournalWrite], held: Held) -> Plan[None]:
    """Check (and lock) the turn of the batch's first write of a running turn before the log
    rows ahead of it: its check locks their session too, which they then need not lock again.
    Nothing before it changes a turn, so checking it earlier decides the same."""
    for write in writes:
        if isinstance(write, AppendEvent):
            continue
        if isinstance(write, EndTurn):
            return  # checked under its owner, by itself
        yield from turn_session(d, write.turn_id, held=held)
        return


def write_plan(
    d: Dialect, space: FreedSpace, write: JournalWrite, now: float, held: Held | None = None
) -> Plan[Any]:
    """The plan of one write (``held``: what the batch it is part of checked already)."""
    match write:  # (the most frequent first: most writes are log rows and call states)
        case AppendEvent():
            return append_event(d, write, now, held)
        case UpsertToolCall():
            return upsert_call(d, write, now, held)
        case AppendMessage():
            return append_message(d, space, write, now, held)
        case AppendPartialText():
            return append_partial_text(d, write, now, held)
        case ReplaceMessage():
            return replace_message(d, write, held)
        case DiscardPartialText():
            return discard(d, space, write, now, held)
        case EndTurn():
            return end_turn(d, space, write, now, held)
        case KeepFileImage():
            return keep_file_image(d, write, now, held)
