"""The streamed text a journal holds until a gate flushes it.

:class:`TextBuffers` keeps, per (step, block), the text of the live deltas not written yet —
through a :class:`~drover.store.redact.StreamRedactor`, which keeps back a tail that could be
the start of a secret — with the numbers those deltas were published under
(:class:`~drover.store.numbering.StreamMarks`). A flush takes what is safe to write as
:class:`~drover.store.batch.AppendPartialText` writes, each with the numbers it covers and
where each delta ends. It also remembers, per step, the first number of the text rows written
(a finished step's rows are folded into its message from there, see :mod:`drover.store.fold`)
and the first number of deltas a finished message or a discarding retry superseded before
they were written (the next log row covers it). The gates themselves are the journal's.
"""

from __future__ import annotations

from drover.store.batch import AppendPartialText
from drover.store.numbering import StreamMarks
from drover.store.redact import Redactor, StreamRedactor


class TextBuffers:
    def __init__(self, redactor: Redactor) -> None:
        self._redactor = redactor
        self._texts: dict[tuple[int, int], StreamRedactor] = {}
        self._marks: dict[tuple[int, int], StreamMarks] = {}
        self._fold_from: dict[int, int] = {}
        #: Bytes fed since the last take.
        self.unflushed = 0
        # The first number of superseded deltas no row holds yet.
        self._absorb: int | None = None
        # The block the last delta went to, its stream and marks: the next delta almost
        # always goes to the same one (forgotten whenever a block is).
        self._last: tuple[int, int, StreamRedactor, StreamMarks | None] | None = None

    def feed(self, step: int, index: int, text: str, seq: int | None) -> None:
        last = self._last
        if (
            last is None
            or last[0] != step
            or last[1] != index
            or (seq is not None and last[3] is None)
        ):
            last = self._last = self._block(step, index, seq is not None)
        last[2].feed(text)
        marks = last[3]
        if seq is not None and marks is not None:  # (never None for a numbered delta)
            marks.feed(seq, len(text))
        # (bytes: an ASCII string's length is its size, without encoding a copy)
        self.unflushed += len(text) if text.isascii() else len(text.encode())

    def _block(
        self, step: int, index: int, numbered: bool
    ) -> tuple[int, int, StreamRedactor, StreamMarks | None]:
        key = (step, index)
        stream = self._texts.get(key)
        if stream is None:
            stream = self._texts[key] = StreamRedactor(self._redactor)
        marks = self._marks.get(key)
        if marks is None and numbered:
            marks = self._marks[key] = StreamMarks()
        return step, index, stream, marks

    def take(self, turn_id: str | None, *, final: bool) -> list[AppendPartialText]:
        """The writes of the text that is safe to write (all of it when ``final``)."""
        out: list[AppendPartialText] = []
        for key, stream in sorted(self._texts.items()):
            text = stream.take(final=final)
            marks = self._marks.get(key)
            span = None
            if marks is not None:
                span = marks.release(marks.unwritten() - stream.held_chars, len(text))
            if text and turn_id is not None:
                step, index = key
                first, last, cuts = span if span is not None else (None, None, None)
                out.append(AppendPartialText(turn_id, step, index, text, first, last, cuts))
                if first is not None:
                    self._fold_from[step] = min(first, self._fold_from.get(step, first))
        if final:
            self._texts.clear()
            self._marks.clear()
            self._last = None
        self.unflushed = 0
        return out

    def drop(self, step: int) -> None:
        """Forget the step's unwritten text (a finished message or a retry supersedes it)."""
        self._last = None
        for key in [k for k in self._texts if k[0] == step]:
            del self._texts[key]
            marks = self._marks.pop(key, None)
            first = None if marks is None else marks.first_unstarted()
            if first is not None:
                self._absorb = first if self._absorb is None else min(self._absorb, first)
        if not self._texts:
            self.unflushed = 0

    def absorbed(self) -> int | None:
        """The first superseded number no row holds yet, once (the next row covers it)."""
        first, self._absorb = self._absorb, None
        return first

    def fold_from(self, step: int) -> int | None:
        """The first number of the step's text rows, once (its message folds them)."""
        return self._fold_from.pop(step, None)

    def clear(self) -> None:
        self._texts.clear()
        self._marks.clear()
        self._last = None
