"""A character whose two UTF-16 halves arrive in two deltas (``\\ud83d`` then ``\\ude00``, as a
server cutting JavaScript strings sends it) reaches the turn whole, live and stored, through each
real SDK; a half with no partner becomes U+FFFD instead of text no journal can write."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from drover import Agent
from drover.core.accumulate import parse_tool_input
from drover.core.events import TextDelta
from drover.core.messages import Usage
from drover.core.model_stream import BlockDelta, BlockStart, BlockStop, StreamEnd, StreamEvent
from drover.providers.whole_text import REPLACEMENT, WholeText
from drover.testing.server import FakeLLMServer

from .conftest import make_provider

#: Placeholders for the two halves of U+1F600, written into the JSON as escapes.
HIGH, LOW = "HIGH_HALF", "LOW_HALF"


def _escaped(data: dict[str, Any]) -> str:
    return json.dumps(data).replace(HIGH, "\\ud83d").replace(LOW, "\\ude00")


def _anthropic(deltas: list[str]) -> str:
    def event(name: str, data: dict[str, Any]) -> str:
        return f"event: {name}\ndata: {_escaped({'type': name, **data})}\n\n"

    usage = {"input_tokens": 5, "output_tokens": 1}
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": "m"}
    message |= {"content": [], "stop_reason": None, "stop_sequence": None, "usage": usage}
    out = event("message_start", {"message": message})
    out += event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}})
    for text in deltas:
        delta = {"type": "text_delta", "text": text}
        out += event("content_block_delta", {"index": 0, "delta": delta})
    out += event("content_block_stop", {"index": 0})
    end = {"stop_reason": "end_turn", "stop_sequence": None}
    out += event("message_delta", {"delta": end, "usage": {"output_tokens": 4}})
    return out + event("message_stop", {})


def _openai(deltas: list[str]) -> str:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        body = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
        return f"data: {_escaped({**body, 'choices': [choice]})}\n\n"

    out = chunk({"role": "assistant", "content": ""})
    out += "".join(chunk({"content": text}) for text in deltas)
    return out + chunk({}, "stop") + "data: [DONE]\n\n"


def _responses(deltas: list[str]) -> str:
    def frame(kind: str, n: int, **fields: Any) -> str:
        return (
            f"event: {kind}\ndata: {_escaped({'type': kind, **fields, 'sequence_number': n})}\n\n"
        )

    whole = "".join(deltas).replace(HIGH + LOW, "\U0001f600")
    part = {"type": "output_text", "text": whole, "annotations": []}
    item = {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed"}
    response = {"id": "resp_1", "object": "response", "status": "in_progress", "output": []}
    usage = {"input_tokens": 5, "output_tokens": 4, "total_tokens": 9}
    out = frame("response.created", 0, response=response)
    out += frame("response.output_item.added", 1, output_index=0, item={**item, "content": []})
    for n, text in enumerate(deltas, start=2):
        out += frame("response.output_text.delta", n, output_index=0, content_index=0, delta=text)
    done = {**item, "content": [part]}
    out += frame("response.output_item.done", 8, output_index=0, item=done)
    completed = {**response, "status": "completed", "output": [done], "usage": usage}
    return out + frame("response.completed", 9, response=completed)


STREAMS = {"anthropic": _anthropic, "openai": _openai, "openai-responses": _responses}


@pytest.mark.parametrize("protocol", sorted(STREAMS))
@pytest.mark.parametrize(
    ("deltas", "text"),
    [
        (["smile " + HIGH, LOW + " done"], "smile \U0001f600 done"),
        (["smile " + HIGH, LOW], "smile \U0001f600"),
        (["a lone " + LOW + " half"], f"a lone {REPLACEMENT} half"),
        (["cut " + HIGH], f"cut {REPLACEMENT}"),
    ],
    ids=["split", "split-at-the-end", "lone-low", "high-at-the-end"],
)
async def test_a_split_character_reaches_the_turn_whole(
    protocol: str, deltas: list[str], text: str, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.script({"raw_text": STREAMS[protocol](deltas)})
    provider = make_provider(protocol, fake_llm)
    live: list[str] = []
    async with Agent(provider, store=tmp_path / "j.db", workdir=tmp_path) as agent:
        async with agent.run_stream("smile") as stream:
            async for event in stream:
                if isinstance(event, TextDelta):
                    live.append(event.text)
        (session,) = await agent.store.list_sessions()
        (turn,) = await agent.store.turns(session.id)
        (message,) = await agent.store.turn_messages(turn.id)
    assert turn.status == "completed"
    assert "".join(live) == text
    for piece in live:
        piece.encode()  # every live delta is text a journal can write
    assert message.message.text == text


class _Mapper:
    """A response's events as a provider's mapper gives them, one list per feed."""

    def __init__(self, feeds: list[list[StreamEvent]], end: list[StreamEvent]) -> None:
        self._feeds, self._end = iter(feeds), end

    def feed(self, _event: Any, /) -> list[StreamEvent]:
        return next(self._feeds)

    def finish(self) -> list[StreamEvent]:
        return self._end


def _text(index: int, data: str, kind: str = "text") -> BlockDelta:
    return BlockDelta(index=index, kind=kind, data=data)  # type: ignore[arg-type]


def test_each_block_keeps_its_own_half_and_a_cut_stream_ends_it() -> None:
    end = StreamEnd(stop_reason="end_turn", usage=Usage())
    feeds: list[list[StreamEvent]] = [
        [BlockStart(index=0, kind="thinking"), _text(0, "think \ud83d", "thinking")],
        [BlockStart(index=1, kind="text"), _text(1, "say \ud83d")],
        [_text(0, "\ude00", "thinking"), _text(1, "\ude00!")],
        [_text(1, " more \ud83d")],
    ]
    mended = WholeText(_Mapper(feeds, [end]))
    out = [event for _ in feeds for event in mended.feed(None)] + mended.finish()
    deltas = [(e.index, e.kind, e.data) for e in out if isinstance(e, BlockDelta)]
    assert deltas == [
        (0, "thinking", "think "),
        (1, "text", "say "),
        (0, "thinking", "\U0001f600"),
        (1, "text", "\U0001f600!"),
        (1, "text", " more "),
        (1, "text", REPLACEMENT),  # the stream ended with a half held: it is not lost silently
    ]
    assert out[-1] is end


def test_text_without_halves_passes_as_the_same_objects() -> None:
    events: list[StreamEvent] = [_text(0, "plain"), _text(0, "café ☕ 😀"), BlockStop(index=0)]
    assert WholeText(_Mapper([events], [])).feed(None) is events


def test_a_tool_input_with_escaped_halves_is_made_whole() -> None:
    """A tool call's input arrives as JSON source text: its escapes are joined by the decoder,
    and a half with no partner (which ``json`` reads as it is) becomes U+FFFD."""
    raw = '{"path": "a.txt", "content": "smile \\ud83d\\ude00, cut \\ud83d", "\\udc00": [1]}'
    value, error = parse_tool_input(raw)
    assert error is None
    assert value == {
        "path": "a.txt",
        "content": f"smile \U0001f600, cut {REPLACEMENT}",
        REPLACEMENT: [1],
    }
    json.dumps(value, ensure_ascii=False).encode()  # storable
    assert parse_tool_input('{"a": "\\\\ud83d"}') == ({"a": "\\ud83d"}, None)  # text, no escape
