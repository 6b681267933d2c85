"""The stream reducer: neutral stream events in, content blocks out.

Pure state, no I/O. Blocks are keyed by the index the provider gave them; indexes may have gaps
and the final order follows the indexes. Text and JSON fragments are kept as lists and joined
once, so a long answer costs O(n) work. Tool input is parsed once, at the end of its block; an
empty input means ``{}`` and unparseable input is kept as an ``input_error`` for the loop to turn
into an error result.

:meth:`Accumulator.partial_message` gives what a cut-off stream produced so far: finished
blocks plus the text of a block that was still streaming, marked partial. Unfinished tool calls
and unsigned thinking are left out, because no API accepts them back.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, assert_never

from drover.core.messages import (
    ContentBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
    Usage,
    mend_json,
)
from drover.core.model_stream import (
    BlockDelta,
    BlockKind,
    BlockStart,
    BlockStop,
    RetryNotice,
    StopReason,
    StreamEnd,
    StreamEvent,
    UsageUpdate,
)


@dataclass(slots=True)
class _OpenBlock:
    kind: BlockKind
    id: str
    name: str
    meta: dict[str, Any]
    parts: list[str] = field(default_factory=list)
    signature: list[str] = field(default_factory=list)


#: A ``\\u`` escape of a UTF-16 surrogate in JSON text.
_ESCAPED_SURROGATE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def parse_tool_input(raw: str) -> tuple[dict[str, Any], str | None]:
    """Parse accumulated tool-input JSON: ``(input, None)`` or ``({}, error)``. A surrogate
    written as an escape comes out whole or as U+FFFD (:func:`~drover.core.messages.mend_json`)."""
    if not raw.strip():
        return {}, None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        return {}, f"tool input is not valid JSON ({exc.msg} at position {exc.pos})"
    except RecursionError:
        return {}, "tool input is nested too deeply to read"
    if not isinstance(value, dict):
        return {}, f"tool input must be a JSON object, got {type(value).__name__}"
    if "\\u" in raw and _ESCAPED_SURROGATE.search(raw):
        value = mend_json(value)
    return value, None


class Accumulator:
    """Reduces one response's stream events into an assistant message."""

    def __init__(self) -> None:
        self._open: dict[int, _OpenBlock] = {}
        self._done: dict[int, ContentBlock] = {}
        self.usage = Usage()
        self.stop_reason: StopReason | None = None
        self.meta: dict[str, Any] = {}

    # -- reducing ------------------------------------------------------------------------------

    def apply(self, event: StreamEvent) -> ContentBlock | None:
        """Apply one event; returns the block it finished, if any."""
        match event:
            case RetryNotice():
                return None
            case BlockStart():
                self._open[event.index] = _OpenBlock(
                    kind=event.kind, id=event.id, name=event.name, meta=dict(event.meta)
                )
                return None
            case BlockDelta():
                block = self._open.get(event.index)
                if block is None:
                    # A delta without a start: tolerate it as the start of a block of its kind.
                    kind: BlockKind = "tool_use" if event.kind == "input_json" else "text"
                    if event.kind in ("thinking", "signature"):
                        kind = "thinking"
                    block = self._open[event.index] = _OpenBlock(kind=kind, id="", name="", meta={})
                if event.kind == "signature":
                    block.signature.append(event.data)
                else:
                    block.parts.append(event.data)
                return None
            case BlockStop():
                open_block = self._open.pop(event.index, None)
                if open_block is None:
                    return None
                if event.data is not None:
                    open_block.parts = [event.data]
                open_block.meta.update(event.meta)
                finished = _finish(open_block)
                self._done[event.index] = finished
                return finished
            case UsageUpdate():
                self.usage = _merge_usage(self.usage, event.usage)
                return None
            case StreamEnd():
                self.usage = _merge_usage(self.usage, event.usage)
                self.stop_reason = event.stop_reason
                self.meta.update(event.meta)
                # Blocks the provider never closed are finished as they stand.
                for index in sorted(self._open):
                    self._done[index] = _finish(self._open[index])
                self._open.clear()
                return None
            case _:
                assert_never(event)

    # -- results -------------------------------------------------------------------------------

    @property
    def has_content(self) -> bool:
        """True once anything the user could have seen was produced."""
        return bool(self._done) or any(b.parts for b in self._open.values())

    def blocks(self) -> list[ContentBlock]:
        return [self._done[i] for i in sorted(self._done) if not _is_empty(self._done[i])]

    def message(self) -> Message:
        return Message(role="assistant", content=tuple(self.blocks()), meta=dict(self.meta))

    def open_tool_calls(self) -> list[tuple[int, str, str]]:
        """(index, id, name) of tool calls whose input was still streaming."""
        return [(i, b.id, b.name) for i, b in sorted(self._open.items()) if b.kind == "tool_use"]

    def partial_message(self) -> Message | None:
        """What a cut-off response produced, or None if nothing worth keeping."""
        blocks: dict[int, ContentBlock] = {}
        for index, done in self._done.items():
            if isinstance(done, ThinkingBlock) and done.signature is None and not done.meta:
                continue
            blocks[index] = done
        for index, open_block in self._open.items():
            if open_block.kind == "text" and open_block.parts:
                blocks[index] = TextBlock(
                    text="".join(open_block.parts), partial=True, meta=open_block.meta
                )
        kept = [blocks[i] for i in sorted(blocks) if not _is_empty(blocks[i])]
        if not kept:
            return None
        return Message(role="assistant", content=tuple(kept), meta=dict(self.meta))


def _finish(block: _OpenBlock) -> ContentBlock:
    match block.kind:
        case "text":
            return TextBlock(text="".join(block.parts), meta=block.meta)
        case "thinking":
            signature = "".join(block.signature) or None
            redacted = block.meta.pop("redacted_data", None)
            return ThinkingBlock(
                thinking="".join(block.parts),
                signature=signature,
                redacted_data=redacted,
                meta=block.meta,
            )
        case "tool_use":
            parsed, error = parse_tool_input("".join(block.parts))
            return ToolUseBlock(
                id=block.id, name=block.name, input=parsed, input_error=error, meta=block.meta
            )
        case _:
            assert_never(block.kind)


def _is_empty(block: ContentBlock) -> bool:
    if isinstance(block, TextBlock):
        return block.text == ""
    if isinstance(block, ThinkingBlock):
        return block.thinking == "" and block.redacted_data is None and not block.meta
    return False


def _merge_usage(old: Usage, new: Usage) -> Usage:
    """Usage figures are cumulative per response: keep the largest known value of each."""
    return Usage(
        input_tokens=max(old.input_tokens, new.input_tokens),
        output_tokens=max(old.output_tokens, new.output_tokens),
        cache_read_tokens=max(old.cache_read_tokens, new.cache_read_tokens),
        cache_write_tokens=max(old.cache_write_tokens, new.cache_write_tokens),
        partial=new.partial,
    )
