"""Event streams read line by line as the SSE standard reads them: a line ends at CRLF, at LF or
at a lone CR, and nowhere else.

httpx's ``iter_lines``/``aiter_lines`` end lines where ``str.splitlines`` does, which also
includes U+0085, U+2028, U+2029 (and U+000B, U+000C, U+001C-U+001E): an event whose JSON data
holds one of those characters unescaped would be cut in two, and a test would see a parse error
where a browser's ``EventSource`` sees the exact text.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import AsyncIterator, Iterator

import httpx2

_LINE_END = re.compile(r"\r\n|\r|\n")


def split_lines(text: str) -> list[str]:
    """``text`` cut at every SSE line end (the last item: what follows the last one)."""
    return _LINE_END.split(text)


class LineSplitter:
    """The lines of a UTF-8 stream fed chunk by chunk; a chunk may end anywhere, inside a
    character or between the CR and the LF of a CRLF."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")()
        self._tail = ""
        # The text so far ended with a CR: an LF opening the next chunk ends no second line.
        self._after_cr = False

    def feed(self, chunk: bytes) -> list[str]:
        """The lines that ``chunk`` completes."""
        text = self._decoder.decode(chunk)
        if not text:
            return []
        if self._after_cr and text.startswith("\n"):
            text = text[1:]
        self._after_cr = text.endswith("\r")
        lines = split_lines(self._tail + text)
        self._tail = lines.pop()
        return lines

    def end(self) -> list[str]:
        """The last line when the stream did not end with a line end (as httpx gives it)."""
        rest = self._tail + self._decoder.decode(b"", final=True)
        self._tail = ""
        return split_lines(rest) if rest else []


def sse_lines(response: httpx2.Response) -> Iterator[str]:
    """The lines of a streamed response (``client.stream(...)``), in place of
    ``response.iter_lines()``."""
    splitter = LineSplitter()
    for chunk in response.iter_bytes():
        yield from splitter.feed(chunk)
    yield from splitter.end()


async def asse_lines(response: httpx2.Response) -> AsyncIterator[str]:
    """:func:`sse_lines` of a response streamed by an ``AsyncClient``."""
    splitter = LineSplitter()
    async for chunk in response.aiter_bytes():
        for line in splitter.feed(chunk):
            yield line
    for line in splitter.end():
        yield line
