"""A message posted while a turn runs, through real ``drover serve`` processes and the fake
LLM: queued durably (run in order, once each, after the turn — after a SIGKILL and restart
too), cancelled, or stopping the turn with its work kept (``interrupt``) or discarded
(``rollback``) at several points of a tool turn, with histories valid on three protocols."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from drover.core.messages import Message
from drover.runtime.runner import load_history
from drover.store.sqlite.store import SqliteStore
from drover.testing.scripted import request_problems
from drover.testing.server import FakeLLMServer

from .support import Served, Sse, clean_env, read_events, servers

#: An answer of many deltas (8 characters each), and the stream frame it stalls after: inside
#: its text on each of the three protocols.
LONG = "Working through the request step by step, and this goes on for a good while. " * 2
STALL = 7
NO_PROBLEMS = {"anthropic": [], "openai": [], "openai-responses": []}


def _post(c: httpx2.Client, sid: str, content: str, if_busy: str | None = None) -> Any:
    body = {"content": content} if if_busy is None else {"content": content, "if_busy": if_busy}
    reply = c.post(f"/v1/sessions/{sid}/messages", json=body)
    assert reply.status_code == 202, reply.text
    return reply.json()


def _user_texts(body: dict[str, Any]) -> list[str]:
    """The user's own words in a recorded request (any of the three protocols)."""
    out = []
    for item in body.get("messages") or body.get("input") or []:
        if item.get("role") != "user":
            continue
        content = item.get("content")
        if isinstance(content, str):
            out.append(content)
            continue
        for block in content or []:
            if block.get("type") in ("text", "input_text"):
                out.append(block["text"])
    return out


def _count(events: list[Sse], kind: str) -> int:
    return sum(e.event == kind for e in events)


@pytest.fixture
def serve_stalled(fake_llm: FakeLLMServer, tmp_path: Path) -> Iterator[Callable[..., Served]]:
    """``serve(*flags, key=)``: a server whose model streams may stall as long as a test needs
    (a stalled reply is how a turn is held running); stopped at teardown."""
    with servers(fake_llm, tmp_path) as start:

        def stalled(*flags: str, key: str = "ANTHROPIC_API_KEY") -> Served:
            return start(*flags, env=clean_env(DROVER_STALL_TIMEOUT="600", **{key: "test"}))

        yield stalled


@pytest.mark.parametrize("takeover", ["resume", "end"])
def test_two_queued_messages_survive_sigkill_and_run_in_order_once(
    fake_llm: FakeLLMServer, serve_stalled: Callable[..., Served], takeover: str
) -> None:
    """Queued messages run after a restart whether the cut-off turn is resumed or only
    ended (``--takeover end``): they are the user's own messages, not the cut-off work."""
    fake_llm.script(
        {"text": LONG, "stall_after": STALL},
        {"text": "second done"},
        {"text": "third done"},
    )
    server = serve_stalled()
    with server.client() as c:
        sid = c.post("/v1/sessions", json={}).json()["id"]
        first = _post(c, sid, "first")["turn_id"]
        read_events(c, sid, until=lambda ev, _: ev.event == "text_delta")  # it streams, stalled
        busy = c.post(f"/v1/sessions/{sid}/messages", json={"content": "no"})
        assert busy.status_code == 409 and busy.json()["turn_id"] == first
        second = _post(c, sid, "second", "enqueue")
        third = _post(c, sid, "third", "enqueue")
        assert second["queued"] is True and third["queued"] is True
        snap = c.get(f"/v1/sessions/{sid}").json()
        assert [q["message_id"] for q in snap["queued"]] == [
            second["message_id"],
            third["message_id"],
        ]
        assert [q["content"] for q in snap["queued"]] == ["second", "third"]
        assert snap["running_turn_id"] == first
        # Announced in the stream, numbered among the running turn's events.
        live = read_events(c, sid, until=lambda _, got: _count(got, "message_queued") == 2)
        queued = [e for e in live if e.event == "message_queued"]
        assert [e.data["message_id"] for e in queued] == [
            second["message_id"],
            third["message_id"],
        ]
    server.stop(signal.SIGKILL)

    restarted = serve_stalled("--takeover", takeover)
    with restarted.client() as c:
        events = read_events(c, sid, until=lambda _, got: _count(got, "done") == 2)
        snap = c.get(f"/v1/sessions/{sid}").json()
    turns = snap["turns"]
    assert [t["status"] for t in turns] == ["interrupted", "completed", "completed"]
    assert [t["user_message"]["content"][0]["text"] for t in turns[1:]] == ["second", "third"]
    assert snap["queued"] == []
    started = [e.data for e in events if e.event == "message_started"]
    assert [(d["message_id"], d["turn_id"]) for d in started] == [
        (second["message_id"], turns[1]["id"]),
        (third["message_id"], turns[2]["id"]),
    ]
    requests = fake_llm.requests
    assert len(requests) == 3  # each queued message ran once
    assert _user_texts(requests[1].body)[-1] == "second"
    assert _user_texts(requests[2].body)[-1] == "third"
    # The first turn's kept work went before the second message.
    assert "first" in _user_texts(requests[1].body)


def test_a_cancelled_message_does_not_run(
    fake_llm: FakeLLMServer, serve_stalled: Callable[..., Served]
) -> None:
    fake_llm.script({"text": LONG, "stall_after": STALL}, {"text": "kept done"})
    fake_llm.allow_unexpected = True  # the stalled stream is cut by the interrupt
    server = serve_stalled()
    with server.client() as c:
        sid = c.post("/v1/sessions", json={}).json()["id"]
        _post(c, sid, "first")
        read_events(c, sid, until=lambda ev, _: ev.event == "text_delta")
        dropped = _post(c, sid, "dropped", "enqueue")["message_id"]
        kept = _post(c, sid, "kept", "enqueue")["message_id"]
        gone = c.delete(f"/v1/sessions/{sid}/queue/{dropped}")
        assert gone.status_code == 200 and gone.json() == {"message_id": dropped, "cancelled": True}
        assert c.delete(f"/v1/sessions/{sid}/queue/{dropped}").status_code == 404
        assert c.delete(f"/v1/sessions/{sid}/queue/nope").status_code == 404
        snap = c.get(f"/v1/sessions/{sid}").json()
        assert [q["message_id"] for q in snap["queued"]] == [kept]
        assert c.post(f"/v1/sessions/{sid}/interrupt", json={}).status_code == 202
        events = read_events(c, sid, until=lambda _, got: _count(got, "done") == 1)
        snap = c.get(f"/v1/sessions/{sid}").json()
    assert [e.data["message_id"] for e in events if e.event == "message_cancelled"] == [dropped]
    assert [t["status"] for t in snap["turns"]] == ["interrupted", "completed"]
    assert snap["turns"][1]["user_message"]["content"][0]["text"] == "kept"
    assert all("dropped" not in _user_texts(r.body) for r in fake_llm.requests)


def test_if_busy_is_checked(fake_llm: FakeLLMServer, serve: Callable[..., Served]) -> None:
    fake_llm.script({"text": "hello"})
    server = serve()
    with server.client() as c:
        sid = c.post("/v1/sessions", json={}).json()["id"]
        bad = c.post(f"/v1/sessions/{sid}/messages", json={"content": "x", "if_busy": "later"})
        assert bad.status_code == 422
        assert "if_busy must be one of" in bad.json()["error"]["message"]
        # Enqueue on an idle session starts the turn at once.
        assert "turn_id" in _post(c, sid, "hi", "enqueue")
        read_events(c, sid)


# -- interrupt and rollback at several points of a tool turn, on three protocols --------------

PROTOCOLS = {
    "anthropic": ("anthropic:test", "ANTHROPIC_API_KEY"),
    "openai": ("openai:test", "OPENAI_API_KEY"),
    "openai-responses": ("openai-responses:test", "OPENAI_API_KEY"),
}
POINTS = ("text streaming", "tool running", "answer streaming")


def _tool_turn(point: str) -> list[dict[str, Any]]:
    """The first turn's replies, stopping at ``point``."""
    command = "sleep 60" if point == "tool running" else "echo hi"
    first: dict[str, Any] = {
        "text": LONG,
        "tool_calls": [{"name": "bash", "input": {"command": command}}],
    }
    if point == "text streaming":
        first["stall_after"] = STALL
        return [first]
    if point == "tool running":
        return [first]
    return [first, {"text": LONG, "stall_after": STALL}]


def _reached(point: str) -> Callable[[Sse, list[Sse]], bool]:
    def at(ev: Sse, got: list[Sse]) -> bool:
        if point == "text streaming":
            return ev.event == "text_delta"
        if point == "tool running":
            return ev.event == "tool_state" and ev.data["state"] == "running"
        steps = [e.data["step"] for e in got if e.event == "step_started"]
        return ev.event == "text_delta" and steps[-1:] == [2]

    return at


async def _history(db: Path, sid: str) -> list[Message]:
    """The session's history as the next request would start from it."""
    async with SqliteStore(str(db)) as store:
        history = await load_history(store, sid)
    return [*history.committed, *history.pending]


@pytest.mark.parametrize("protocol", list(PROTOCOLS))
def test_interrupt_and_rollback_at_each_point_of_a_tool_turn(
    protocol: str,
    fake_llm: FakeLLMServer,
    serve_stalled: Callable[..., Served],
    tmp_path: Path,
) -> None:
    model, key = PROTOCOLS[protocol]
    base = fake_llm.base_url if protocol == "anthropic" else fake_llm.openai_base_url
    server = serve_stalled("--model", model, "--base-url", base, key=key)
    fake_llm.allow_unexpected = True  # stalled streams are cut when their turn stops
    for mode in ("interrupt", "rollback"):
        for point in POINTS:
            fake_llm.script(*_tool_turn(point), {"text": f"new answer after {mode}"})
            before = len(fake_llm.requests)
            with server.client() as c:
                sid = c.post("/v1/sessions", json={}).json()["id"]
                first = _post(c, sid, "do the work")["turn_id"]
                read_events(c, sid, until=_reached(point))
                second = _post(c, sid, "change of plan", mode)["turn_id"]
                assert second != first
                events = read_events(c, sid, until=lambda ev, _, t=second: _ended(ev, t))
                snap = c.get(f"/v1/sessions/{sid}").json()
            where = f"{protocol}/{mode}/{point}"
            assert events[-1].event == "done", where
            turns = [(t["status"], t["discarded"]) for t in snap["turns"]]
            assert turns == [("interrupted", mode == "rollback"), ("completed", False)], where
            # The stopped turn's work stays in the journal either way.
            kept = snap["turns"][0]
            assert kept["messages"] or kept["tool_calls"] or point == "text streaming", where
            assert len(fake_llm.requests) > before
            last = fake_llm.requests[-1].body
            words = _user_texts(last)
            assert words[-1] == "change of plan", where
            if mode == "rollback":
                assert "do the work" not in words and "previous_response_id" not in last, where
            elif protocol != "openai-responses":  # (which sends only what is new)
                assert words[0] == "do the work", where
            history = asyncio.run(_history(tmp_path / "journal.db", sid))
            said = [m.text for m in history if m.role == "user" and m.text]
            if mode == "interrupt":  # the work kept goes before the new message
                assert said == ["do the work", "change of plan"], where
                assert any(m.role == "assistant" for m in history[1:-1]), where
            else:
                assert said == ["change of plan"], where
            assert request_problems(history) == NO_PROBLEMS, where
    assert fake_llm.violations == []


def _ended(ev: Sse, turn_id: str) -> bool:
    return ev.event in ("done", "incomplete", "error") and ev.data["turn_id"] == turn_id
