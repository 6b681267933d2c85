"""Streamed text made whole where a character arrives in two halves.

JSON writes a character beyond U+FFFF either as itself or as two ``\\u`` escapes, a UTF-16
surrogate pair; a server that cuts its text by UTF-16 units (JavaScript strings are such) can put
the two escapes in two deltas. The SDKs' ``json.loads`` reads each delta as it comes, so a text
delta may end with the first half (a high surrogate) and the next begin with the second. Python
does not join them, and neither half can be encoded as UTF-8: written to the journal, the text
fails every write; shown, it prints two replacement characters. A lone half can also come on its
own from a broken server.

:class:`WholeText` wraps a response's :class:`~drover.providers.base.EventMapper`: a text
or thinking delta that ends with a high surrogate keeps it back and gives it to the next delta of
its block, pairs are joined into their character, and any half left alone (at the block's end,
the response's end, or where no partner follows) becomes U+FFFD. Text without surrogates — all
text a well-behaved server sends — passes as the same objects.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from drover.core.messages import has_surrogate, mend_surrogates
from drover.core.model_stream import BlockDelta, BlockStop, StreamEvent

if TYPE_CHECKING:
    from drover.providers.base import EventMapper

#: The kinds of delta that carry text (a tool call's input arrives as JSON source text, whose
#: escapes its decoder joins).
_TEXT_KINDS = frozenset({"text", "thinking"})
REPLACEMENT = "\ufffd"


class WholeText:
    """An :class:`EventMapper` whose text deltas hold only whole characters (module docstring)."""

    def __init__(self, mapper: EventMapper) -> None:
        self._mapper = mapper
        #: A block's held high surrogate, with its delta's kind, by block index.
        self._held: dict[int, BlockDelta] = {}

    def feed(self, event: Any, /) -> list[StreamEvent]:
        return self._mend(self._mapper.feed(event))

    def finish(self) -> list[StreamEvent]:
        ended = self._mend(self._mapper.finish())
        if not self._held:
            return ended
        left = [replace(held, data=REPLACEMENT) for held in self._held.values()]
        self._held.clear()
        return [*left, *ended]

    def _mend(self, events: list[StreamEvent]) -> list[StreamEvent]:
        if not self._held:
            for e in events:
                if type(e) is BlockDelta and has_surrogate(e.data):
                    break
            else:
                return events  # the common case (every delta of a sane server): nothing built
        out: list[StreamEvent] = []
        for event in events:
            if type(event) is BlockDelta and event.kind in _TEXT_KINDS:
                mended = self._delta(event)
                if mended is not None:
                    out.append(mended)
                continue
            if type(event) is BlockStop and event.index in self._held:
                out.append(replace(self._held.pop(event.index), data=REPLACEMENT))
            out.append(event)
        return out

    def _delta(self, event: BlockDelta) -> BlockDelta | None:
        data = event.data
        held = self._held.pop(event.index, None)
        if held is not None:
            data = held.data + data
        elif not has_surrogate(data):
            return event
        if data and "\ud800" <= data[-1] <= "\udbff":
            self._held[event.index] = replace(event, data=data[-1])
            data = data[:-1]
        data = mend_surrogates(data)
        return replace(event, data=data) if data else None
