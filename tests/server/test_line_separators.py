"""Text that holds characters ``str.splitlines`` ends lines at (U+2028, U+2029, U+0085…) goes
through the event stream whole: SSE ends lines only at CR, LF or CRLF, and the test client reads
it so (:mod:`support.sse`), live and on replay alike."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.sse import LineSplitter, split_lines

from drover.testing.server import FakeLLMServer

from .support import Served, Sse, live_turn, read_events

#: Every character ``str.splitlines`` ends a line at, besides CR and LF, and a CRLF.
SEPARATED = "one\u2028two\u2029three\u0085four\r\nfive\x0b\x0c\x1c\x1d\x1e end"


def _seen(events: list[Sse]) -> dict[str, Any]:
    """What a client shows of the turn: the texts of each part, as the events carry them."""
    by_type: dict[str, list[dict[str, Any]]] = {}
    for ev in events:
        by_type.setdefault(ev.event, []).append(ev.data)
    steps: dict[int, str] = {}
    for delta in by_type["text_delta"]:
        steps[delta["step"]] = steps.get(delta["step"], "") + delta["text"]
    [started] = by_type["turn_started"]
    [output] = [s["output"] for s in by_type["tool_state"] if s["state"] == "output-available"]
    [results] = by_type["tool_results"]
    [done] = by_type["done"]
    return {
        "prompt": started["user_message"]["content"][0]["text"],
        "steps": steps,
        "output": output,
        "result": results["message"]["content"][0]["content"],
        "done": done["text"],
    }


def test_line_separators_reach_the_client_exactly(
    fake_llm: FakeLLMServer, serve: Callable[..., Served], tmp_path: Path
) -> None:
    fake_llm.script(
        {"text": SEPARATED, "tool_calls": [{"name": "read_file", "input": {"path": "s.txt"}}]},
        {"text": f"Read: {SEPARATED}"},
    )
    server = serve()
    (tmp_path / "work" / "s.txt").write_text(SEPARATED, encoding="utf-8", newline="")
    with server.client() as c:
        sid = c.post("/v1/sessions", json={}).json()["id"]
        live = live_turn(c, sid, SEPARATED)
        replayed = read_events(c, sid, after=0)
    expected = {
        "prompt": SEPARATED,
        "steps": {1: SEPARATED, 2: f"Read: {SEPARATED}"},
        "output": SEPARATED,
        "result": SEPARATED,
        "done": f"Read: {SEPARATED}",
    }
    assert _seen(live) == expected
    assert _seen(replayed) == expected


STREAM = "id: 1\r\ndata: a\u2028b\u0085c\r\rdata: \u2029\n\ndata: last\r\n\r\n: tail"


@pytest.mark.parametrize("size", [1, 2, 3, 7, len(STREAM.encode())])
def test_the_reader_ends_lines_only_where_sse_does_wherever_the_chunks_end(size: int) -> None:
    """Chunks cut inside a character and between the CR and LF of a CRLF."""
    data = STREAM.encode()
    splitter = LineSplitter()
    lines = [
        line for at in range(0, len(data), size) for line in splitter.feed(data[at : at + size])
    ]
    lines += splitter.end()
    assert lines == [
        "id: 1",
        "data: a\u2028b\u0085c",
        "",
        "data: \u2029",
        "",
        "data: last",
        "",
        ": tail",
    ]
    assert lines == split_lines(STREAM)
