"""Managing sessions over HTTP on a real ``drover serve``: ``PATCH /v1/sessions/{id}`` (a
title), ``DELETE /v1/sessions/{id}`` (everything goes, refused while a turn runs, followers'
streams end), both owned by the token that made the session; and the usage a running turn
has reported so far, kept in the snapshot."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import httpx2
from support.sse import sse_lines

from drover.testing.server import FakeLLMServer

from .support import BOUND, Served, new_session, parse_sse, read_events

WAIT_FOR_FLAG = {
    "text": "Waiting.",
    "tool_calls": [
        {"name": "bash", "input": {"command": "while [ ! -e go.flag ]; do sleep 0.05; done"}}
    ],
}


def _error(reply: httpx2.Response) -> tuple[int, str]:
    return reply.status_code, reply.json()["error"]["code"]


def test_rename_sets_a_title_that_later_turns_keep(
    fake_llm: FakeLLMServer, serve: Callable[..., Served]
) -> None:
    fake_llm.script({"text": "Hello."})
    server = serve()
    with server.client() as c:
        sid = new_session(c)
        reply = c.patch(f"/v1/sessions/{sid}", json={"title": "  Parser\nwork  "})
        assert reply.status_code == 200, reply.text
        summary = reply.json()
        assert summary["id"] == sid and summary["title"] == "Parser work"
        assert set(summary) == {
            "id", "title", "model", "created_at", "updated_at", "running_turn_id",
        }  # fmt: skip
        c.post(f"/v1/sessions/{sid}/messages", json={"content": "first prompt"})
        read_events(c, sid)
        assert c.get(f"/v1/sessions/{sid}").json()["title"] == "Parser work"
        assert c.get("/v1/sessions").json()["sessions"][0]["title"] == "Parser work"

        url = f"/v1/sessions/{sid}"
        refused = [
            (c.patch(url, json={"title": "   "}), 422),
            (c.patch(url, json={"title": "x" * 201}), 422),
            (c.patch(url, json={"title": 5}), 422),
            (c.patch(url, json={}), 422),
            (c.patch(url, json={"title": "x", "other": 1}), 422),
            (c.patch(url, content=b'{"title": "x"}', headers={"content-type": "text/plain"}), 415),
            (c.patch(url, content=b"{", headers={"content-type": "application/json"}), 400),
            (c.patch("/v1/sessions/nope", json={"title": "x"}), 404),
        ]
        for reply, status in refused:
            assert reply.status_code == status, (reply.request.content, reply.text)
            assert reply.json()["error"]["message"]
        assert c.get(url).json()["title"] == "Parser work"


def test_delete_is_refused_while_a_turn_runs_then_takes_everything(
    fake_llm: FakeLLMServer, serve: Callable[..., Served], tmp_path: Path
) -> None:
    fake_llm.script(WAIT_FOR_FLAG, {"text": "Flag seen."}, {"text": "Other."})
    server = serve()
    with server.client() as c:
        sid, other = new_session(c), new_session(c)
        turn_id = c.post(f"/v1/sessions/{sid}/messages", json={"content": "wait"}).json()["turn_id"]
        read_events(c, sid, until=lambda ev, _: ev.data.get("state") == "running")
        busy = c.delete(f"/v1/sessions/{sid}")
        assert _error(busy) == (409, "session_busy")
        assert busy.json()["turn_id"] == turn_id
        assert c.get(f"/v1/sessions/{sid}").json()["running_turn_id"] == turn_id

        (tmp_path / "work" / "go.flag").touch()
        done = read_events(c, sid)
        assert done[-1].event == "done"
        c.post(f"/v1/sessions/{other}/messages", json={"content": "other"})
        read_events(c, other)

        # A follower's stream ends when the session goes.
        subscribed, ended = threading.Event(), threading.Event()

        def follow() -> None:
            with c.stream("GET", f"/v1/sessions/{sid}/events?after={done[-1].id}") as stream:
                assert stream.status_code == 200
                for ev in parse_sse(sse_lines(stream)):
                    if ev.event == "status":  # sent once the stream is subscribed
                        subscribed.set()
            ended.set()

        follower = threading.Thread(target=follow, daemon=True)
        follower.start()
        assert subscribed.wait(BOUND)
        deleted = c.delete(f"/v1/sessions/{sid}")
        assert deleted.status_code == 200, deleted.text
        assert deleted.json() == {"id": sid, "deleted": True}
        assert ended.wait(BOUND), "the follower's stream did not end"
        follower.join(BOUND)

        for reply in (
            c.get(f"/v1/sessions/{sid}"),
            c.get(f"/v1/sessions/{sid}/events"),
            c.post(f"/v1/sessions/{sid}/messages", json={"content": "x"}),
            c.delete(f"/v1/sessions/{sid}"),
            c.patch(f"/v1/sessions/{sid}", json={"title": "x"}),
        ):
            assert _error(reply) == (404, "not_found"), reply.request.url
        assert [s["id"] for s in c.get("/v1/sessions").json()["sessions"]] == [other]
        assert len(c.get(f"/v1/sessions/{other}").json()["turns"]) == 1


def test_another_token_can_neither_rename_nor_delete(
    fake_llm: FakeLLMServer, serve: Callable[..., Served]
) -> None:
    server = serve("--token", "alpha-token", "--token", "beta-token")
    with server.client("alpha-token") as alpha, server.client("beta-token") as beta:
        sid = new_session(alpha)
        assert _error(beta.patch(f"/v1/sessions/{sid}", json={"title": "x"})) == (404, "not_found")
        assert _error(beta.delete(f"/v1/sessions/{sid}")) == (404, "not_found")
        with server.client() as anonymous:
            assert anonymous.delete(f"/v1/sessions/{sid}").status_code == 401
        assert alpha.get(f"/v1/sessions/{sid}").json()["title"] is None
        assert alpha.delete(f"/v1/sessions/{sid}").status_code == 200


def test_a_running_turns_usage_so_far_is_in_the_snapshot(
    fake_llm: FakeLLMServer, serve: Callable[..., Served], tmp_path: Path
) -> None:
    fake_llm.script(WAIT_FOR_FLAG, {"text": "Flag seen."})
    server = serve()
    with server.client() as c:
        sid = new_session(c)
        c.post(f"/v1/sessions/{sid}/messages", json={"content": "wait"})
        events = read_events(c, sid, until=lambda ev, _: ev.data.get("state") == "running")
        # As the answer began (partial), then at its end: the snapshot has the latest totals.
        started, report = [ev.data for ev in events if ev.event == "usage"]
        assert started["usage"]["partial"] and not report["usage"]["partial"]
        [turn] = c.get(f"/v1/sessions/{sid}").json()["turns"]
        assert turn["status"] == "running"
        usage = turn["usage"]
        assert (usage["input_tokens"], usage["output_tokens"], usage["partial"]) == (
            report["total_input"],
            report["total_output"],
            True,
        )
        assert usage["input_tokens"] > 0
        (tmp_path / "work" / "go.flag").touch()
        read_events(c, sid)
        [turn] = c.get(f"/v1/sessions/{sid}").json()["turns"]
        assert turn["status"] == "completed" and not turn["usage"]["partial"]
        assert turn["usage"]["input_tokens"] > usage["input_tokens"]
