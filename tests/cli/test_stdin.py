"""``StdinLines``: the one reader of stdin, on a real pipe and a real file."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from drover.cli.stdin import StdinLines


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    read_end, write_end = os.pipe()
    yield read_end, write_end
    for fd in (read_end, write_end):
        with contextlib.suppress(OSError):  # closed by the test
            os.close(fd)


async def test_a_cancelled_read_takes_no_line_away(pipe: tuple[int, int]) -> None:
    read_end, write_end = pipe
    lines = StdinLines(read_end)
    waiting = asyncio.get_running_loop().create_task(lines.readline())
    await asyncio.sleep(0)  # let it start waiting on the empty pipe
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    os.write(write_end, b"for the next reader\n")
    assert await lines.readline() == b"for the next reader"


async def test_lines_of_one_chunk_are_kept_in_order_and_the_tail_ends_at_eof(
    pipe: tuple[int, int],
) -> None:
    read_end, write_end = pipe
    os.write(write_end, b"one\r\ntwo\nthree")
    os.close(write_end)
    lines = StdinLines(read_end)
    assert [await lines.readline() for _ in range(4)] == [b"one", b"two", b"three", None]
    assert await lines.readline() is None


async def test_push_back_comes_first(pipe: tuple[int, int]) -> None:
    read_end, write_end = pipe
    os.write(write_end, b"second\n")
    lines = StdinLines(read_end)
    lines.push_back(b"first")
    assert await lines.readline() == b"first"
    assert await lines.readline() == b"second"


async def test_a_regular_file_is_read_without_the_event_loop(tmp_path: Path) -> None:
    path = tmp_path / "input.txt"
    path.write_bytes(b"a\nb\n")
    fd = os.open(path, os.O_RDONLY)
    try:
        lines = StdinLines(fd)
        assert [await lines.readline() for _ in range(3)] == [b"a", b"b", None]
    finally:
        os.close(fd)
