"""An image prompt is journaled once: the bytes live in its turn's user message, never again in
the event log, the messages of later turns or their requests' records."""

from __future__ import annotations

import base64
import sqlite3
from pathlib import Path

from support.images import png_bytes

from drover import Agent
from drover.core.messages import ImageBlock, user_message
from drover.testing.scripted import Reply, ScriptedProvider


def occurrences(db: Path, needle: str) -> int:
    """How many times ``needle`` is in any value of any table of the SQLite file."""
    with sqlite3.connect(db) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return sum(
            str(value).count(needle)
            for table in tables
            for row in conn.execute(f'SELECT * FROM "{table}"')
            for value in row
        )


async def test_an_image_is_stored_once_whatever_follows(tmp_path: Path) -> None:
    data = base64.b64encode(png_bytes(width=40, height=40, seed=7)).decode()
    image = ImageBlock(media_type="image/png", data=data)
    provider = ScriptedProvider([Reply(text="A square."), Reply(text="Still a square.")])
    db = tmp_path / "journal.db"
    async with Agent(provider, tools=[], store=str(db), workdir=tmp_path) as agent:
        first = await agent.run(user_message("What is this?", images=[image]))
        await agent.run("And now?", session=first.session_id)
        events = await agent.store.events_after(first.session_id)
    # Both requests carried the image (history)...
    assert all(data in str(r.messages) for r in provider.requests)
    # ...the journal holds it once: in the first turn's user message.
    assert occurrences(db, data) == 1
    [started] = [e for e in events if e.type == "turn_started"][:1]
    assert started.payload["user_message"]["content"][1] == {
        "type": "image",
        "media_type": "image/png",
        "bytes": image.size,
        "sha256": image.digest,
    }
    # A new process loads the history with the image whole.
    provider = ScriptedProvider([Reply(text="Yes.")])
    async with Agent(provider, tools=[], store=str(db), workdir=tmp_path) as agent:
        await agent.run("Once more?", session=first.session_id)
    assert data in str(provider.requests[0].messages[0])
