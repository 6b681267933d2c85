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
"""

from __future__ import annotations

from typing import NamedTuple

_BOM = "\ufeff"


class SseEvent(NamedTuple):
    """One dispatched event: its name (``""`` when it had none) and its data lines joined."""

    event: str
    data: str


class SseDecoder:
    """Incremental decoder: :meth:`feed` it the body's chunks, get the complete events back."""

    __slots__ = ("_buffer", "_data", "_event", "_skip_lf", "_started")

    def __init__(self) -> None:
        #: Bytes of an unfinished line (decoded only whole, so a character split across
        #: chunks stays intact).
        self._buffer = b""
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
        if self._buffer:
            chunk = self._buffer + chunk
        if chunk[-1:] == b"\r":
            self._skip_lf = True
        # ``bytes.splitlines`` splits at exactly \r\n, \r and \n (unlike ``str.splitlines``).
        lines = chunk.splitlines(keepends=True)
        last = lines[-1]
        if last[-1:] in (b"\n", b"\r"):
            self._buffer = b""
        else:
            self._buffer = last
            lines.pop()
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
