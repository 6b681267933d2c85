"""Fork and rewind over HTTP on a real ``drover serve`` and the fake LLM: a fork diverges from
its source; a rewind of a turn that wrote and edited files puts them back byte for byte and
the conversation goes on from before it; a file changed outside drover refuses the rewind
unless ``force``; ``bash`` commands are named as not rewindable."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx2
from support.sse import sse_lines

from drover.testing.server import FakeLLMServer

from .support import BOUND, Served, new_session, read_events

ORIGINAL = b"line one\r\nline two\n\xe2\x82\xac tail without newline"


def _turn(c: httpx2.Client, sid: str, content: str) -> str:
    reply = c.post(f"/v1/sessions/{sid}/messages", json={"content": content})
    assert reply.status_code == 202, reply.text
    turn_id = str(reply.json()["turn_id"])
    read_events(
        c,
        sid,
        until=lambda ev, _: (
            ev.event in ("done", "incomplete", "error") and ev.data["turn_id"] == turn_id
        ),
    )
    return turn_id


def _user_texts(body: dict[str, Any]) -> list[str]:
    """The user prompts (text content) of a recorded Anthropic request."""
    out = []
    for message in body["messages"]:
        if message["role"] != "user":
            continue
        content = message["content"]
        if isinstance(content, str):
            out.append(content)
            continue
        out += [b["text"] for b in content if b.get("type") == "text"]
    return out


def test_fork_then_diverge(fake_llm: FakeLLMServer, serve: Callable[..., Served]) -> None:
    fake_llm.script(
        {"text": "One."}, {"text": "Two."}, {"text": "In the fork."}, {"text": "In the source."}
    )
    server = serve()
    with server.client() as c:
        sid = new_session(c)
        first = _turn(c, sid, "first")
        _turn(c, sid, "second")

        reply = c.post(f"/v1/sessions/{sid}/fork", json={"turn_id": first})
        assert reply.status_code == 201, reply.text
        fork = reply.json()
        assert fork["forked_from"] == sid and fork["forked_turn"] == first
        snap = c.get(f"/v1/sessions/{fork['id']}").json()
        assert (snap["forked_from"], snap["forked_turn"]) == (sid, first)
        assert [t["user_message"]["content"][0]["text"] for t in snap["turns"]] == ["first"]

        _turn(c, fork["id"], "fork only")
        _turn(c, sid, "source only")
        bodies = [r.body for r in fake_llm.requests]
        assert _user_texts(bodies[2]) == ["first", "fork only"]
        assert _user_texts(bodies[3]) == ["first", "second", "source only"]
        assert len(c.get(f"/v1/sessions/{sid}").json()["turns"]) == 3
        assert len(c.get(f"/v1/sessions/{fork['id']}").json()["turns"]) == 2

        whole = c.post(f"/v1/sessions/{sid}/fork", json={})
        assert whole.status_code == 201
        assert len(c.get(f"/v1/sessions/{whole.json()['id']}").json()["turns"]) == 3

        for body, status in [
            ({"turn_id": "nope"}, 404),
            ({"turn_id": 5}, 422),
            ({"turn": first}, 422),
        ]:
            reply = c.post(f"/v1/sessions/{sid}/fork", json=body)
            assert reply.status_code == status, reply.text
        other = new_session(c)
        reply = c.post(f"/v1/sessions/{other}/fork", json={"turn_id": first})
        assert reply.status_code == 404  # a turn of another session


def _file_turns(fake_llm: FakeLLMServer) -> None:
    fake_llm.script(
        {"tool_calls": [{"name": "write_file", "input": {"path": "keep.txt", "content": "v1\n"}}]},
        {"text": "Created."},
        {
            "tool_calls": [
                {
                    "name": "edit_file",
                    "input": {"path": "keep.txt", "old_string": "v1", "new_string": "v2"},
                },
                {"name": "write_file", "input": {"path": "orig.txt", "content": "overwritten"}},
                {"name": "write_file", "input": {"path": "dir/made.txt", "content": "made\n"}},
                {"name": "bash", "input": {"command": "echo side effect"}},
            ]
        },
        {
            "tool_calls": [
                {
                    "name": "edit_file",
                    "input": {"path": "orig.txt", "old_string": "over", "new_string": "re"},
                }
            ]
        },
        {"text": "Changed."},
    )


def test_rewind_restores_files_byte_for_byte_and_the_conversation(
    fake_llm: FakeLLMServer, serve: Callable[..., Served], tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "orig.txt").write_bytes(ORIGINAL)
    _file_turns(fake_llm)
    fake_llm.script({"text": "After the rewind."})
    server = serve()
    with server.client() as c:
        sid = new_session(c)
        first = _turn(c, sid, "create")
        second = _turn(c, sid, "change")
        assert (work / "keep.txt").read_text() == "v2\n"
        assert (work / "orig.txt").read_text() == "rewritten"

        url = f"/v1/sessions/{sid}/rewind"
        preview = c.post(url, json={"turn_id": second, "dry_run": True})
        assert preview.status_code == 200, preview.text
        plan = preview.json()
        assert {f["path"]: f["action"] for f in plan["files"]} == {
            "keep.txt": "restore",
            "orig.txt": "restore",
            "dir/made.txt": "delete",
        }
        assert "-v2\n+v1\n" in plan["diff"]
        assert plan["not_rewindable"] == ["bash: echo side effect"]
        assert plan["prompt"] == "change"
        assert (work / "keep.txt").read_text() == "v2\n"  # a dry run does nothing

        reply = c.post(url, json={"turn_id": second, "files": True})
        assert reply.status_code == 200, reply.text
        done = reply.json()
        assert done["rewound"] == [second]
        assert sorted(done["restored"]) == ["dir/made.txt", "keep.txt", "orig.txt"]
        assert done["not_rewindable"] == ["bash: echo side effect"]
        assert (work / "keep.txt").read_bytes() == b"v1\n"
        assert (work / "orig.txt").read_bytes() == ORIGINAL
        assert not (work / "dir/made.txt").exists()

        turns = c.get(f"/v1/sessions/{sid}").json()["turns"]
        assert [(t["id"], t["rewound"]) for t in turns] == [(first, False), (second, True)]
        _turn(c, sid, "again")
        assert _user_texts(fake_llm.requests[-1].body) == ["create", "again"]

        again = c.post(url, json={"turn_id": second})
        assert (again.status_code, again.json()["error"]["code"]) == (409, "already_rewound")
        for body, status in [
            ({}, 422),
            ({"turn_id": "nope"}, 404),
            ({"turn_id": first, "files": "yes"}, 422),
            ({"turn_id": first, "other": 1}, 422),
        ]:
            reply = c.post(url, json=body)
            assert reply.status_code == status, reply.text


def test_rewind_is_refused_after_an_outside_change_unless_forced(
    fake_llm: FakeLLMServer, serve: Callable[..., Served], tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "orig.txt").write_bytes(ORIGINAL)
    _file_turns(fake_llm)
    server = serve()
    with server.client() as c:
        sid = new_session(c)
        _turn(c, sid, "create")
        second = _turn(c, sid, "change")
        (work / "keep.txt").write_text("edited by hand\n")

        url = f"/v1/sessions/{sid}/rewind"
        reply = c.post(url, json={"turn_id": second})
        assert reply.status_code == 409, reply.text
        error = reply.json()
        assert error["error"]["code"] == "rewind_conflict"
        assert error["paths"] == ["keep.txt"]
        assert "changed outside drover" in error["error"]["message"]
        # Nothing moved: neither the other files nor the conversation.
        assert (work / "orig.txt").read_text() == "rewritten"
        assert not any(t["rewound"] for t in c.get(f"/v1/sessions/{sid}").json()["turns"])

        reply = c.post(url, json={"turn_id": second, "force": True})
        assert reply.status_code == 200, reply.text
        assert (work / "keep.txt").read_bytes() == b"v1\n"
        assert (work / "orig.txt").read_bytes() == ORIGINAL


def test_a_live_stream_is_told_of_a_rewind_as_a_replay_is(
    fake_llm: FakeLLMServer, serve: Callable[..., Served]
) -> None:
    """A client following the session when a rewind happens gets ``turns_rewound`` live, with
    the number, ``prev`` and data a replay of the log serves for it."""
    fake_llm.script({"text": "One."}, {"text": "Two."})
    server = serve()
    with server.client() as c:
        sid = new_session(c)
        first = _turn(c, sid, "one")
        second = _turn(c, sid, "two")
        last = int(c.get(f"/v1/sessions/{sid}").json()["last_event_id"])
        following = threading.Event()
        live: list[tuple[str | None, str, dict[str, Any]]] = []

        def follow() -> None:
            url = f"/v1/sessions/{sid}/events?after={last}"
            with server.client() as own, own.stream("GET", url, timeout=BOUND) as response:
                for event, frame in _frames(sse_lines(response), time.monotonic() + BOUND):
                    if event == "status":
                        following.set()  # subscribed: what comes now comes live
                        continue
                    live.append((frame.get("id"), event, frame["data"]))
                    if event == "turns_rewound":
                        return

        with ThreadPoolExecutor(1) as pool:
            reader = pool.submit(follow)
            assert following.wait(BOUND)
            reply = c.post(f"/v1/sessions/{sid}/rewind", json={"turn_id": first})
            assert reply.status_code == 200, reply.text
            reader.result(timeout=BOUND)
        rewound = {
            "type": "turns_rewound",
            "turn_ids": [first, second],
            "turn_id": None,
            "seq": last + 1,
            "prev": last,
        }
        assert live == [(str(last + 1), "turns_rewound", rewound)]
        replayed = read_events(c, sid, after=last, until=lambda ev, _: True)
        assert [(str(e.id), e.event, e.data) for e in replayed] == [
            (live[0][0], "turns_rewound", live[0][2])
        ]
        snapshot = c.get(f"/v1/sessions/{sid}").json()
        assert [t["rewound"] for t in snapshot["turns"]] == [True, True]
        assert snapshot["last_event_id"] == int(live[0][0] or 0)


def _frames(lines: Iterator[str], deadline: float) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(event, {"id", "data"})`` of each SSE frame, as sent (comments left out), until the
    ``deadline`` (keep-alive comments would otherwise keep a missing event waited for)."""
    frame: dict[str, Any] = {}
    event = "message"
    for line in lines:
        if time.monotonic() > deadline:
            raise AssertionError("the awaited event did not come")
        if line == "":
            if "data" in frame:
                yield event, frame
            frame, event = {}, "message"
        elif line.startswith(":"):
            continue
        else:
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "event":
                event = value
            elif name == "id":
                frame["id"] = value
            elif name == "data":
                frame["data"] = json.loads(value)
