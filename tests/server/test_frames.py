"""The wire bytes of live and replayed frames, the marks that cut rows back into deltas, and
the collector settings ``drover serve`` runs with: the fast paths are checked against the
plain ones, byte for byte."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from drover.journal.records import EventRecord
from drover.runtime.hub import SessionFeed, make_frame
from drover.server.gc_settings import YOUNG_THRESHOLD
from drover.server.replay import continuable, expand
from drover.store.sql.rows import decode_marks, encode_marks

TEXTS = [
    "plain",
    'quote " and backslash \\ and slash /',
    "new\nline\ttab\r\x00\x1f\x7f",
    "non-ASCII é 漢字 \u2028\u2029 🙂",
    "%s %d %% %(name)s {}",
    "",
]


def _plain(seq: int, turn_id: str | None, payload: dict[str, Any], prev: int) -> bytes:
    """The frame as the contract describes it, built the slow, obvious way."""
    body = {**payload, "seq": seq, "prev": prev, "turn_id": turn_id}
    body = json.dumps(body, ensure_ascii=False)
    body = json.dumps(json.loads(body), ensure_ascii=False, separators=(",", ":"))
    return f"id: {seq}\nevent: {payload['type']}\ndata: {body}\n\n".encode()


@pytest.mark.parametrize("text", TEXTS)
def test_a_text_delta_frame_is_the_json_of_its_event(text: str) -> None:
    payload = {"type": "text_delta", "text": text, "index": 0, "step": 3}
    assert make_frame(41, "turn-%d", payload, 40).wire == _plain(41, "turn-%d", payload, 40)
    assert make_frame(42, None, payload, 17).wire == _plain(42, None, payload, 17)


def test_a_feed_keeps_its_block_template_only_while_the_block_lasts() -> None:
    feed = SessionFeed()
    blocks = [("t1", 0, 1), ("t1", 0, 1), ("t1", 1, 1), ("t1", 1, 2), ("t2", 1, 2), (None, 0, 1)]
    for seq, (turn, index, step) in enumerate(blocks, start=1):
        for text in TEXTS[:3]:
            payload = {"type": "text_delta", "text": text, "index": index, "step": step}
            frame = feed.frame(seq, turn, payload, seq - 1)
            assert (frame.seq, frame.type) == (seq, "text_delta")
            assert frame.wire == _plain(seq, turn, payload, seq - 1)


def test_other_events_and_unusual_text_deltas_take_the_plain_path() -> None:
    feed = SessionFeed()
    payloads: list[dict[str, Any]] = [
        {"type": "done", "text": "answer", "usage": {"input": 1}},
        {"type": "text_delta", "text": "x", "index": 0, "step": 1, "extra": True},
        {"type": "text_delta", "text": 5, "index": 0, "step": 1},
        {"type": "tool_state", "call_id": "c", "state": "running", "seq": 99},
    ]
    for payload in payloads:
        frame = feed.frame(7, "t", payload, 3)
        data = json.loads(frame.wire.decode().split("data: ", 1)[1])
        assert data == {**payload, "seq": 7, "prev": 3, "turn_id": "t"}
        assert frame.wire == _plain(7, "t", payload, 3)


def _text_row(seq: int, deltas: list[str], turn_id: str = "t") -> EventRecord:
    ends, total = [], 0
    for delta in deltas:
        total += len(delta)
        ends.append(total)
    marks = tuple((seq + i, end) for i, end in enumerate(ends))
    stored = decode_marks(seq, encode_marks(seq, marks))
    assert stored == marks
    return EventRecord(
        session_id="s",
        seq=seq,
        turn_id=turn_id,
        type="text_delta",
        payload={"type": "text_delta", "text": "".join(deltas), "index": 0, "step": 1},
        created_at=0.0,
        last_seq=seq + len(deltas) - 1,
        marks=stored,
    )


def test_a_replay_cuts_coalesced_rows_back_into_the_live_frames() -> None:
    deltas = [TEXTS[i % len(TEXTS)] or "z" for i in range(3000)]
    rows = [_text_row(10, deltas[:1000]), _text_row(1010, deltas[1000:])]
    live = [
        make_frame(10 + i, "t", {"type": "text_delta", "text": d, "index": 0, "step": 1}, 9 + i)
        for i, d in enumerate(deltas)
    ]
    # (the first row's number follows 9, which these rows do not hold: ``prev`` is the id
    # the replay starts after)
    assert expand(rows, 9) == live
    assert expand(rows, 1500) == live[1491:]


def test_a_redacted_row_is_one_event_with_the_rest_of_its_last_delta() -> None:
    def row(seq: int, last: int, text: str, marks: Any) -> EventRecord:
        payload = {"type": "text_delta", "text": text, "index": 0, "step": 1}
        return EventRecord(
            session_id="s",
            seq=seq,
            turn_id="t",
            type="text_delta",
            payload=payload,
            created_at=0.0,
            last_seq=last,
            marks=marks,
        )

    # A flush redaction changed (no marks), ending inside delta 12; the next one holds the
    # rest of 12, then 13.
    redacted = row(10, 12, "ab [REDACTED] c", None)
    rest = row(12, 13, "dEfgh", ((12, 2), (13, 5)))
    got = [
        (f.seq, json.loads(f.wire.decode().split("data: ", 1)[1]))
        for f in expand([redacted, rest], 9)
    ]
    assert [(seq, d["text"], d["prev"]) for seq, d in got] == [
        (12, "ab [REDACTED] cdE", 9),
        (13, "fgh", 12),
    ]
    assert [continuable(k, [redacted, rest], None) for k in (10, 11, 12, 13)] == [
        False,
        False,
        True,
        True,
    ]
    # Cut there by a crash: its text is served, its last number cannot be continued.
    assert [f.seq for f in expand([redacted], 9)] == [12]
    assert not continuable(12, [redacted], None)


def test_marks_decode_back_to_what_was_encoded() -> None:
    marks = [(5, 3), (6, 9), (9, 10), (200, 4000)]
    assert decode_marks(5, encode_marks(5, marks)) == tuple(marks)
    assert decode_marks(5, "[]") == ()
    assert decode_marks(5, "[1,2,7]") == ((6, 2),)  # a trailing half pair is ignored
    assert decode_marks(5, None) is None


def test_settle_freezes_the_startup_heap_and_raises_the_young_threshold() -> None:
    # In a child process: freezing the test runner's own heap would outlive this test.
    code = (
        "import gc; from drover.server import gc_settings; gc_settings.settle(); "
        "print(gc.get_freeze_count(), gc.get_threshold()[0])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    frozen, young = (int(n) for n in out.stdout.split())
    assert frozen > 1000  # the modules imported so far
    assert young == YOUNG_THRESHOLD
