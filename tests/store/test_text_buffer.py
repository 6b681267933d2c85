"""The journal's text buffers store what feeding them delta by delta stores.

:class:`~drover.journal.text_buffer.TextBuffers` keeps each live delta raw and does the
redaction and the marks of a block once per flush. Here it is checked against the buffers as
they were when every delta went through the stream redactor and the marks one by one (kept
below as the reference): the same writes — text, numbers and marks, byte for byte — the same
byte count for the flush gate, the same fold numbers, for any interleaving of deltas (split
anywhere, secrets included), flushes and blocks.
"""

from __future__ import annotations

from collections import deque

from hypothesis import example, given, settings
from hypothesis import strategies as st

from drover.journal.numbering import StreamMarks
from drover.journal.redact import Redactor, StreamRedactor
from drover.journal.text_buffer import TextBuffers
from drover.journal.writes import AppendPartialText

from .test_redact import _pieces


class _ReferenceMarks:
    """The marks as they were fed: one (seq, start, end) per delta, popped one by one."""

    def __init__(self) -> None:
        self._pending: deque[tuple[int, int, int]] = deque()
        self._fed = 0
        self._written = 0

    def feed(self, seq: int, length: int) -> None:
        self._pending.append((seq, self._fed, self._fed + length))
        self._fed += length

    def unwritten(self) -> int:
        return self._fed - self._written

    def pending_ends(self) -> list[int]:
        return [end - self._written for _, _, end in self._pending]

    def release(
        self, raw_len: int, stored_len: int
    ) -> tuple[int, int, tuple[tuple[int, int], ...] | None] | None:
        if raw_len <= 0 or not self._pending:
            self._written += max(raw_len, 0)
            return None
        start, end = self._written, self._written + raw_len
        first = last = self._pending[0][0]
        marks: list[tuple[int, int]] = []
        last_end = start
        while self._pending and self._pending[0][2] <= end:
            seq, _, delta_end = self._pending.popleft()
            marks.append((seq, delta_end - start))
            last, last_end = seq, delta_end
        if end > last_end and self._pending:
            last = self._pending[0][0]
        self._written = end
        if raw_len == stored_len:
            return first, last, tuple(marks)
        # Redacted to another length: the row's end only, when a delta ends there.
        return first, last, ((last, stored_len),) if marks and last_end == end else None


class _Reference:
    """The buffers as they were: each delta fed to its block's stream and marks at once."""

    def __init__(self, redactor: Redactor) -> None:
        self._redactor = redactor
        self._texts: dict[tuple[int, int], StreamRedactor] = {}
        self._marks: dict[tuple[int, int], _ReferenceMarks] = {}
        self._fold_from: dict[int, int] = {}
        #: The blocks fed a delta without a number (their rows may end anywhere).
        self._unnumbered: set[tuple[int, int]] = set()
        self.unflushed = 0

    def feed(self, step: int, index: int, text: str, seq: int | None) -> None:
        key = (step, index)
        stream = self._texts.get(key)
        if stream is None:
            stream = self._texts[key] = StreamRedactor(self._redactor)
        marks = self._marks.get(key)
        if marks is None and seq is not None:
            marks = self._marks[key] = _ReferenceMarks()
        stream.feed(text)
        if seq is None:
            self._unnumbered.add(key)
        if seq is not None and marks is not None:
            marks.feed(seq, len(text))
        self.unflushed += len(text.encode())

    def take(self, turn_id: str | None, *, final: bool) -> list[AppendPartialText]:
        out: list[AppendPartialText] = []
        for key, stream in sorted(self._texts.items()):
            marks = self._marks.get(key)
            whole = not final and marks is not None and key not in self._unnumbered
            text = stream.take(final=final, ends=marks.pending_ends() if whole else None)
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
            self._unnumbered.clear()
        self.unflushed = 0
        return out

    def fold_from(self, step: int) -> int | None:
        return self._fold_from.pop(step, None)


_texts = st.one_of(
    st.lists(_pieces, min_size=1, max_size=3).map("".join),
    st.text(max_size=12),  # any characters, the empty delta and non-ASCII included
)
_ops = st.one_of(
    st.tuples(
        st.just("feed"),
        st.integers(0, 1),  # step
        st.integers(0, 1),  # block
        _texts,
        st.integers(1, 20),  # split into pieces of this size
        st.booleans(),  # numbered
    ),
    st.tuples(st.just("take"), st.booleans(), st.sampled_from(["t", None])),
    st.tuples(st.just("fold_from"), st.integers(0, 1)),
)


@settings(max_examples=500, deadline=None)
@given(st.lists(_ops, max_size=30), st.booleans())
# a block partly written (a key-like tail held back), then the rest with a secret redacted
@example(
    [
        ("feed", 0, 0, "word ", 8, True),
        ("take", False, "t"),
        ("feed", 0, 0, "sk-ant-" + "a1b2c3d4e5" * 3 + " ok", 8, True),
        ("take", True, "t"),
    ],
    False,
)
def test_buffers_store_what_delta_by_delta_feeding_stores(
    ops: list[tuple[object, ...]], mixed: bool
) -> None:
    redactor = Redactor([r"CORP-[0-9]{6}"])
    buffers, reference = TextBuffers(redactor), _Reference(redactor)
    seq = 100
    for op in ops:
        match op:
            case ("feed", int(step), int(index), str(text), int(size), bool(numbered)):
                for at in range(0, max(len(text), 1), size):
                    piece = text[at : at + size]
                    number = seq if numbered or not mixed else None
                    seq += 1
                    buffers.feed(step, index, piece, number)
                    reference.feed(step, index, piece, number)
                    assert buffers.unflushed == reference.unflushed
            case ("take", bool(final), turn_id):
                assert isinstance(turn_id, str | None)
                got = buffers.take(turn_id, final=final)
                assert got == reference.take(turn_id, final=final)
            case ("fold_from", int(step)):
                assert buffers.fold_from(step) == reference.fold_from(step)
        assert buffers.unflushed == reference.unflushed
    assert buffers.take("t", final=True) == reference.take("t", final=True)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_texts, st.integers(1, 20), st.booleans()), max_size=20))
# The word in progress ("abcdef") begins inside the delta "d a": the row is "wor".
@example([("word ab", 3, False), ("cdef", 4, True)])
def test_each_row_holds_whole_deltas(feeds: list[tuple[str, int, bool]]) -> None:
    """A flush writes no delta in part, even when the redactor keeps back the end of one:
    each number a row covers is a whole event (a reader current to the row's last number
    holds all of that delta), and its last mark is where its text ends."""
    buffers = TextBuffers(Redactor([r"CORP-[0-9]{6}"]))
    seq = 100
    for text, size, flush in feeds:
        for at in range(0, len(text), size):
            buffers.feed(0, 0, text[at : at + size], seq)
            seq += 1
        if flush:
            for write in buffers.take("t", final=False):
                assert write.marks, write
                assert write.marks[-1] == (write.last_seq, len(write.text)), write


def test_marks_are_cut_where_each_delta_ends() -> None:
    marks = StreamMarks()
    marks.feed([5, 6, 7], [3, 4, 2])
    assert marks.unwritten() == 9
    # A row of 5 raw characters ends inside delta 6: its marks are delta 5's end only.
    assert marks.release(5, 5) == (5, 6, ((5, 3),))
    marks.feed([8], [1])
    # Stored with a different length (a secret redacted) and ending inside delta 7: numbers,
    # no marks (no offset of the row can be mapped to a delta's end).
    assert marks.release(3, 12) == (6, 7, None)
    # Redacted again, ending where delta 8 ends: that end is the only mark.
    assert marks.release(2, 10) == (7, 8, ((8, 10),))
    assert marks.release(0, 0) is None
