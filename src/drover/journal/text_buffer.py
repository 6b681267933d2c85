"""The streamed text a journal holds until a gate flushes it.

:class:`TextBuffers` keeps, per (step, block), the text of the live deltas not written yet — through
a :class:`~drover.journal.redact.StreamRedactor`, which keeps back a tail that could be the start of
a secret — with the numbers those deltas were published under
(:class:`~drover.journal.numbering.StreamMarks`). A delta is only appended, raw, to its block: the
stream and the marks take a flush's deltas in one batch, when it takes them (a step streams a few
hundred deltas and flushes a few times). A flush takes what is safe to write as
:class:`~drover.journal.writes.AppendPartialText` writes, each with the numbers it covers and where
each delta ends — whole deltas only: when the redactor keeps back the end of a delta, the whole
delta waits for the next flush. So every number a row covers is a whole event, and a reader whose
text is current to a row's last number (a snapshot) has all of that delta. It also remembers, per
step, the first number of the text rows written (a finished step's rows are folded into its message
from there, see :mod:`drover.journal.fold`). Nothing fed is ever dropped unwritten: a finished
message or a discarding retry takes the rest of the text first, so every number a live client saw is
in some row. The gates themselves are the journal's.
"""

from __future__ import annotations

from drover.journal.numbering import StreamMarks
from drover.journal.redact import Redactor, StreamRedactor
from drover.journal.writes import AppendPartialText


class _Block:
    """One block's buffered text: the deltas fed since the last take, raw, then — once a take
    needs them — its stream redactor and its marks."""

    __slots__ = ("marks", "numbered", "raw", "stream")

    def __init__(self, redactor: Redactor) -> None:
        self.raw: list[tuple[int | None, str]] = []
        self.stream = StreamRedactor(redactor)
        self.marks: StreamMarks | None = None
        #: Whether every delta fed had a number (the marks then count all of the text).
        self.numbered = True

    def settle(self) -> None:
        """Hand the raw deltas to the stream and the marks, as one batch.

        The same as feeding them one by one: the stream only joins what it is fed, and the
        marks count the raw characters of the numbered deltas only, from the first one on."""
        raw = self.raw
        if not raw:
            return
        seqs, texts = zip(*raw, strict=True)
        raw.clear()
        self.stream.feed("".join(texts))
        if None in seqs:  # (only when numbering failed: the store numbers the rows then)
            self.numbered = False
            numbered = [
                (seq, text) for seq, text in zip(seqs, texts, strict=True) if seq is not None
            ]
            if not numbered:
                return
            seqs, texts = zip(*numbered, strict=True)
        if self.marks is None:
            self.marks = StreamMarks()
        self.marks.feed(seqs, map(len, texts))


class TextBuffers:
    def __init__(self, redactor: Redactor) -> None:
        self._redactor = redactor
        self._blocks: dict[tuple[int, int], _Block] = {}
        self._fold_from: dict[int, int] = {}
        #: Bytes fed since the last take.
        self.unflushed = 0
        # The block the last delta went to and its raw deltas: the next delta almost always
        # goes to the same one (forgotten whenever a block is).
        self._at: tuple[int, int] | None = None
        self._raw: list[tuple[int | None, str]] = []

    @property
    def blocks(self) -> int:
        """Blocks holding text: the most rows the next :meth:`take` writes."""
        return len(self._blocks)

    def feed(self, step: int, index: int, text: str, seq: int | None) -> int:
        """Buffer a delta numbered ``seq`` (None: not numbered); the bytes fed since the last
        take. Per delta only this: the redaction and the marks are a take's work."""
        if self._at != (step, index):
            self._at = key = (step, index)
            block = self._blocks.get(key)
            if block is None:
                block = self._blocks[key] = _Block(self._redactor)
            self._raw = block.raw
        self._raw.append((seq, text))
        # (bytes: an ASCII string's length is its size, without encoding a copy)
        self.unflushed += len(text) if text.isascii() else len(text.encode())
        return self.unflushed

    def take(self, turn_id: str | None, *, final: bool) -> list[AppendPartialText]:
        """The writes of the text that is safe to write (all of it when ``final``)."""
        out: list[AppendPartialText] = []
        for key, block in sorted(self._blocks.items()):
            block.settle()
            stream, marks = block.stream, block.marks
            # A row holds whole deltas only, so that each number it covers is a whole event:
            # a snapshot current to a row's last number holds all of that delta's text.
            ends = None
            if not final and marks is not None and block.numbered:
                ends = marks.pending_ends()
            text = stream.take(final=final, ends=ends)
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
            self.clear()
        self.unflushed = 0
        return out

    def fold_from(self, step: int) -> int | None:
        """The first number of the step's text rows, once (its message folds them)."""
        return self._fold_from.pop(step, None)

    def clear(self) -> None:
        self._blocks.clear()
        self._at = None
