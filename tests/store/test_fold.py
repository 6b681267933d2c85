"""A finished step's text rows fold into its message: the log reads back exactly as before.

Both backends (the ``store`` fixture): a journal streams two text blocks and a tool call's
first state, flushing several coalesced rows; the step's message then folds them. Every
frame a replay can serve — from 0 or after any delta — is the same before and after the
fold, and what is stored is the message once plus the marks.
"""

from __future__ import annotations

from typing import Any

from drover.core.events import AssistantMessage, StepStarted, TextDelta, ToolStateChanged
from drover.core.messages import TextBlock, ToolUseBlock, assistant_message, user_message
from drover.journal.journal import Journal
from drover.journal.protocol import Store
from drover.server.replay import backlog

from .helpers import FakeClock

WORDS = [f"w{i:03d} " for i in range(120)]


def _frames(records: Any, after: int) -> list[tuple[int, bytes]]:
    plan = backlog(after, records, None)
    assert not plan.reset
    return [(f.seq, f.wire) for f in plan.frames]


async def test_folded_rows_replay_exactly_and_hold_the_text_once(store: Store) -> None:
    session = await store.create_session(workdir="/w", model="m")
    turn = await store.begin_turn(session.id, user_message("hi"), "h:1:1", 30)
    clock = FakeClock()
    journal = Journal(store, session.id, clock=clock, sleep=clock.sleep, turn_id=turn.id)
    await journal.send(StepStarted(step=1))
    for i, word in enumerate(WORDS[:60]):
        clock.advance(0.3 if i % 7 == 6 else 0.0)  # the time gate cuts rows now and then
        await journal.send(TextDelta(text=word, index=0))
    streaming = ToolStateChanged(call_id="c", call_index=1, name="bash", state="input-streaming")
    await journal.send(streaming)
    for i, word in enumerate(WORDS[60:]):
        clock.advance(0.3 if i % 5 == 4 else 0.0)
        await journal.send(TextDelta(text=word, index=2))
    before = await store.events_after(session.id)
    texts = [r for r in before if r.type == "text_delta"]
    assert len({r.payload["index"] for r in texts}) == 2 and len(texts) > 6
    assert all("text" in r.payload for r in texts)

    message = assistant_message(
        [
            TextBlock(text="".join(WORDS[:60])),
            ToolUseBlock(id="c", name="bash", input={"command": "true"}),
            TextBlock(text="".join(WORDS[60:])),
        ]
    )
    await journal.send(AssistantMessage(message=message))
    await journal.aclose()
    after = await store.events_after(session.id)

    folded = [r for r in after if r.type == "text_delta"]
    assert len(folded) == 2  # one row per block
    last = max(r.end_seq for r in before)
    for k in [0, *range(1, last + 1)]:
        expected = _frames(before, k)
        got = [f for f in _frames(after, k) if f[0] <= last]
        assert got == expected, f"after {k}"
    # Read back whole, stored once: the rows refer to the message.
    (shown,) = [r for r in after if r.type == "assistant_message"]
    assert shown.payload["message"]["content"][0]["text"] == "".join(WORDS[:60])
