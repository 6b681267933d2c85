"""Rebuilding the model-facing history from stored turns, repaired so any provider accepts it.

:func:`build_history` lays out each turn's user message followed by the turn's messages —
completed turns and the pending work of unfinished ones alike, in turn order, so pending work
lands before the next user message (the model then sees what it did and goes on). Discarded
and still-running turns are skipped.

:func:`repair_history` then makes the result valid for every API, whatever cut the turns short:

* every ``tool_use`` gets a ``tool_result`` in the user message right after its assistant
  message, merged with the results already there and ordered as the calls. A missing result is
  rebuilt from the stored tool call: its recorded output when the call finished (the crash came
  before the results message was written), otherwise an error result saying it was interrupted
  and whether it may have run;
* a ``tool_result`` with no ``tool_use`` before it is dropped;
* text blocks with no visible text (never sent: providers reject them) and empty thinking blocks
  are dropped, and so is a message left with no content; partial text stays, marked partial;
* consecutive user messages are kept in order (providers merge them).

A message whose meta holds :data:`LATE_RESULTS` carries results recorded after their call's
turn had ended (a ``task`` call whose interrupted workers a later turn finished): it is taken
out, and each of its results replaces the result of the same call wherever that stands.

Both functions are pure, deterministic and idempotent: repairing a repaired history changes
nothing. A stored tool call is consulted only for a result that is missing, which a finished
turn never lacks: building with a :class:`CallsConsulted` first says which turns' calls are
needed, so a resume loads those and not every call (and its output) of a long session.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace

from drover.core.events import MAY_HAVE_RUN_TEXT, NOT_RUN_TEXT, TERMINAL_TOOL_STATES
from drover.core.messages import (
    ContentBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    answers_in_order,
)
from drover.journal.records import StoredMessage, ToolCallRecord, TurnRecord
from drover.journal.rules import interrupted_call

#: Message meta key marking late results (see the module docstring).
LATE_RESULTS = "drover_late_results"


Calls = Iterable[ToolCallRecord] | Mapping[str, ToolCallRecord]


def build_history(
    turns: Iterable[tuple[TurnRecord, Sequence[StoredMessage]]],
    tool_calls: Calls = (),
) -> list[Message]:
    """The messages of ``turns`` (with their stored messages), in turn order, repaired.

    ``tool_calls`` (e.g. ``store.tool_calls(session_id=...)``) lets a missing result say what
    became of its call; without it a missing result conservatively says the call may have run.
    """
    messages: list[Message] = []
    for turn, stored in sorted(turns, key=lambda pair: pair[0].seq):
        if turn.discarded or turn.status == "running":
            continue
        if turn.user_message is not None:
            messages.append(turn.user_message)
        messages.extend(s.message for s in sorted(stored, key=lambda s: s.seq))
    late: dict[str, ToolResultBlock] = {}
    for message in messages:
        if message.meta.get(LATE_RESULTS):
            late.update((r.tool_use_id, r) for r in message.tool_results)
    if not late:
        return repair_history(messages, tool_calls)
    kept = [m for m in messages if not m.meta.get(LATE_RESULTS)]
    return [_with_late(m, late) for m in repair_history(kept, tool_calls)]


class CallsConsulted(Mapping[str, ToolCallRecord]):
    """An empty table of tool calls that remembers which call ids a build looked up in it.

    Build with it first: when :attr:`ids` stays empty (every result present, the usual case)
    the history is final and no stored call was needed; otherwise :meth:`turns` names the turns
    whose calls to load before building again."""

    def __init__(self) -> None:
        self.ids: set[str] = set()

    def __getitem__(self, call_id: str) -> ToolCallRecord:
        self.ids.add(call_id)
        raise KeyError(call_id)

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0

    def turns(self, turns: Iterable[tuple[TurnRecord, Sequence[StoredMessage]]]) -> list[str]:
        """The ids of the turns (of ``turns``) that made a looked-up call, in order."""
        return [
            turn.id
            for turn, stored in turns
            if any(use.id in self.ids for s in stored for use in s.message.tool_uses)
        ]


def _with_late(message: Message, late: Mapping[str, ToolResultBlock]) -> Message:
    if not any(r.tool_use_id in late for r in message.tool_results):
        return message
    content = tuple(
        late.get(b.tool_use_id, b) if isinstance(b, ToolResultBlock) else b for b in message.content
    )
    return replace(message, content=content)


def repair_history(messages: Iterable[Message], tool_calls: Calls = ()) -> list[Message]:
    """``messages`` made valid for every provider (see the module docstring); ``tool_calls``
    as records or by call id."""
    calls = tool_calls if isinstance(tool_calls, Mapping) else {c.call_id: c for c in tool_calls}
    cleaned = [m for m in map(_clean, messages) if m is not None]
    out: list[Message] = []
    i = 0
    while i < len(cleaned):
        message = cleaned[i]
        i += 1
        if message.role == "assistant":
            out.append(message)
            uses = message.tool_uses
            if not uses:
                continue
            following = cleaned[i] if i < len(cleaned) else None
            if following is not None and following.role == "user" and following.tool_results:
                out.append(_merge_results(uses, following, calls))
                i += 1
            else:
                results = tuple(_missing_result(use, calls) for use in uses)
                out.append(Message(role="user", content=results))
        elif message.tool_results:
            # Results that answer no tool_use just before them: invalid for every provider.
            rest = tuple(b for b in message.content if not isinstance(b, ToolResultBlock))
            if rest:
                out.append(replace(message, content=rest))
        else:
            out.append(message)
    return out


def _clean(message: Message) -> Message | None:
    content = message.content
    if not content:
        return None
    for block in content:
        if _empty(block):
            kept = tuple(b for b in content if not _empty(b))
            return replace(message, content=kept) if kept else None
    return message


def _empty(block: ContentBlock) -> bool:
    if isinstance(block, TextBlock):
        return not block.text or block.text.isspace()  # as ``not text.strip()``, copying nothing
    if isinstance(block, ThinkingBlock):
        return not block.thinking and block.signature is None and block.redacted_data is None
    return False


def _merge_results(
    uses: Sequence[ToolUseBlock], message: Message, calls: Mapping[str, ToolCallRecord]
) -> Message:
    if answers_in_order(uses, message.content):
        return message
    present: dict[str, ToolResultBlock] = {}
    for result in message.tool_results:
        present.setdefault(result.tool_use_id, result)
    results = tuple(present.get(use.id) or _missing_result(use, calls) for use in uses)
    others = tuple(b for b in message.content if not isinstance(b, ToolResultBlock))
    content: tuple[ContentBlock, ...] = (*results, *others)
    return message if content == message.content else replace(message, content=content)


def _missing_result(use: ToolUseBlock, calls: Mapping[str, ToolCallRecord]) -> ToolResultBlock:
    call = calls.get(use.id)
    if call is None:
        text = MAY_HAVE_RUN_TEXT
    elif call.state in TERMINAL_TOOL_STATES and call.output is not None:
        failed = call.is_error or call.state != "output-available"
        return ToolResultBlock(tool_use_id=use.id, content=call.output, is_error=failed)
    elif call.outcome_unknown:
        text = MAY_HAVE_RUN_TEXT
    elif call.state == "interrupted":
        text = NOT_RUN_TEXT
    else:
        text, _ = interrupted_call(call.state, call.read_only)
    return ToolResultBlock(tool_use_id=use.id, content=text, is_error=True)
