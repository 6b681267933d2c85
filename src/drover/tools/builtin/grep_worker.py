"""The process ``grep`` searches in: Python's ``re`` over files drover chose, bounded.

Python's regular expressions backtrack: ``(a+)+$`` over a line of thirty ``a`` runs for
minutes, holding the GIL all along, and a search in drover's own process would freeze every
turn it serves. ``grep`` therefore runs this script as a child process (``python -I -S``: the
standard library only, nothing from the environment), which drover kills when its time
budget runs out; the script also caps its own memory and CPU time, and reads at most
``max_bytes`` of a file, counting a sparse file by its apparent size.

Protocol (one JSON value per line, UTF-8). On stdin: a header ``{"pattern", "max_matches",
"max_line", "max_bytes", "sniff", "memory", "cpu"}``, then one ``[index, path]`` per file,
``path`` the absolute path drover checked (symbolic links resolved). A file that is not that
path once opened (a link swapped in since) is skipped. On stdout: ``{"m": [index, line
number, text]}`` per matching line (text cut at ``max_line`` characters), ``{"big": [index,
size]}`` per file too large to search, ``{"error": text}`` for a pattern that does not
compile; it stops after ``max_matches`` matches.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import stat
import sys
from typing import Any, TextIO

SHORTENED = " [line shortened]"


def _limit(kind: int, value: int) -> None:
    _soft, hard = resource.getrlimit(kind)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    # Lower already, or not allowed: drover's timeout still holds.
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(kind, (value, hard))


def _emit(out: TextIO, value: Any) -> None:
    out.write(json.dumps(value, ensure_ascii=False) + "\n")
    out.flush()


def _content(path: str, max_bytes: int) -> bytes | int | None:
    """The bytes of the regular file ``path`` (None: not one, or not the file checked; an
    int: its size, when over ``max_bytes``)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if os.readlink(f"/proc/self/fd/{fd}") != path:
            return None
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None  # a FIFO or a device would block or never end
        size = max(info.st_size, info.st_blocks * 512)
        if size > max_bytes:
            return size
        chunks: list[bytes] = []
        left = max_bytes + 1
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        return len(data) if len(data) > max_bytes else data
    except OSError:
        return None
    finally:
        os.close(fd)


def search(header: dict[str, Any], lines: TextIO, out: TextIO) -> None:
    try:
        regex = re.compile(header["pattern"])
    except (re.error, OverflowError, RecursionError) as exc:
        _emit(out, {"error": f"invalid regular expression {header['pattern']!r}: {exc}"})
        return
    max_matches = int(header["max_matches"])
    max_line = int(header["max_line"])
    max_bytes = int(header["max_bytes"])
    sniff = int(header["sniff"])
    found = 0
    for line in lines:
        index, path = json.loads(line)
        data = _content(path, max_bytes)
        if data is None:
            continue
        if isinstance(data, int):
            _emit(out, {"big": [index, data]})
            continue
        if b"\x00" in data[:sniff]:
            continue  # binary
        text = data.decode("utf-8", errors="replace").split("\n")
        if text and text[-1] == "":
            text.pop()
        for number, row in enumerate(text, 1):
            row = row.removesuffix("\r")
            if regex.search(row):
                if len(row) > max_line:
                    row = row[:max_line] + SHORTENED
                _emit(out, {"m": [index, number, row]})
                found += 1
                if found >= max_matches:
                    return


def main() -> None:
    # What drover writes is ASCII (JSON escapes the rest); what this writes is UTF-8.
    with open(sys.stdout.fileno(), "w", encoding="utf-8", closefd=False) as stdout:
        header = json.loads(sys.stdin.readline())
        _limit(resource.RLIMIT_AS, int(header["memory"]))
        _limit(resource.RLIMIT_CPU, int(header["cpu"]))
        search(header, sys.stdin, stdout)


if __name__ == "__main__":
    main()
