"""Server-sent events: the bytes of an ``text/event-stream`` body as (event, data) pairs.

The providers read their APIs' streams with this decoder instead of the SDKs' per-chunk
models (which cost most of a streamed delta's CPU). It follows the WHATWG event-stream
interpretation exactly:

* a line ends at ``\\r\\n``, ``\\r`` or ``\\n``, wherever the body is split into chunks (a
  ``\\r`` at the end of one chunk and a ``\\n`` at the start of the next are one line end);
* one UTF-8 byte order mark at the very start of the stream is dropped;
* a line starting with ``:`` is a comment; ``field:value`` drops one space after the colon, if
  there is one; a line without a colon is a field with an empty value;
* ``data`` lines are joined with ``\\n``; ``event`` sets the event's name; ``id`` and ``retry``
  (which drover does not use) and unknown fields are ignored;
* a blank line dispatches the event, unless neither a ``data`` nor an ``event`` line came (then
  it is dropped); at the end of the body an event not followed by a blank line is discarded,
  as the spec says.

One departure from the spec, to read as the SDKs read: a named event with no ``data`` line is
dispatched, with empty data (the spec drops it). The SDKs' decoders do so, and the Anthropic
SDK raises an ``event: error`` that carries no data as an error; so does drover.

An event without an ``event`` field has the name ``""`` (the spec's default ``message``), so a
caller can tell it apart from a named one.

A line may be long: the Responses API's ``response.completed`` carries the whole answer on one
``data`` line, across hundreds of chunks. An unfinished line is kept as its chunks and joined
once its end arrives, so decoding stays linear in the body's size; a line longer than
``max_line`` bytes (:data:`MAX_LINE_BYTES` unless given) is refused with :class:`SseError`
instead of held without bound.
"""

from __future__ import annotations

from typing import NamedTuple

_BOM = "\ufeff"

#: The longest line a stream may send (a whole answer fits a thousand times over).
MAX_LINE_BYTES = 64 * 1024 * 1024


class SseError(ValueError):
    """The body is not an event stream drover can read (a line longer than allowed)."""


class SseEvent(NamedTuple):
    """One dispatched event: its name (``""`` when it had none) and its data lines joined."""

    event: str
    data: str


class SseDecoder:
    """Incremental decoder: :meth:`feed` it the body's chunks, get the complete events back."""

    __slots__ = ("_data", "_event", "_held", "_max_line", "_pieces", "_skip_lf", "_started")

    def __init__(self, *, max_line: int | None = None) -> None:
        #: The chunks of an unfinished line, and their length (a line is decoded only whole,
        #: so a character split across chunks stays intact).
        self._pieces: list[bytes] = []
        self._held = 0
        self._max_line = MAX_LINE_BYTES if max_line is None else max_line
        self._data: list[str] = []
        self._event = ""
        self._started = False
        #: The last chunk ended with ``\r``: a ``\n`` opening the next one belongs to it.
        self._skip_lf = False

    def feed(self, chunk: bytes) -> list[SseEvent]:
        """The events completed by ``chunk``."""
        if self._skip_lf and chunk[:1] == b"\n":
            chunk = chunk[1:]
        self._skip_lf = False
        if not chunk:
            return []
        if b"\n" not in chunk and b"\r" not in chunk:
            self._hold(chunk)  # (the line goes on: nothing to split, nothing joined yet)
            return []
        if self._pieces:
            self._pieces.append(chunk)
            chunk = b"".join(self._pieces)
            self._pieces, self._held = [], 0
        if chunk[-1:] == b"\r":
            self._skip_lf = True
        # ``bytes.splitlines`` splits at exactly \r\n, \r and \n (unlike ``str.splitlines``).
        lines = chunk.splitlines(keepends=True)
        if lines[-1][-1:] not in (b"\n", b"\r"):
            self._hold(lines.pop())
        events: list[SseEvent] = []
        for raw in lines:
            line = raw.rstrip(b"\r\n").decode("utf-8", errors="replace")
            if not self._started:
                self._started = True
                if line.startswith(_BOM):
                    line = line[1:]
            event = self._line(line)
            if event is not None:
                events.append(event)
        return events

    def _hold(self, piece: bytes) -> None:
        """Keep ``piece`` of an unfinished line for the chunk that ends it."""
        self._held += len(piece)
        if self._held > self._max_line:
            self._pieces, self._held = [], 0
            raise SseError(f"an event-stream line longer than {self._max_line:,} bytes")
        self._pieces.append(piece)

    def _line(self, line: str) -> SseEvent | None:
        if not line:
            return self._dispatch()
        if line[0] == ":":
            return None
        name, colon, value = line.partition(":")
        if colon and value[:1] == " ":
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        return None

    def _dispatch(self) -> SseEvent | None:
        data, event = self._data, self._event
        self._data, self._event = [], ""
        if not data:
            return SseEvent(event, "") if event else None
        return SseEvent(event, data[0] if len(data) == 1 else "\n".join(data))
