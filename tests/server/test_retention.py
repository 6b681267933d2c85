"""Retention under a real ``drover serve``: ``drover gc`` run while a turn runs prunes the idle
sessions and never the running one, whose turn then finishes whole; ``[retention]`` in the
config makes the server prune on its own schedule, the running session again spared."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import httpx2

from drover.testing.server import FakeLLMServer

from .support import BOUND, DROVER, Served, clean_env, new_session, read_events, start_server

WRITE = {"name": "write_file", "input": {"path": "out.txt", "content": "hello"}}


def _finished(c: httpx2.Client) -> str:
    sid = new_session(c)
    assert c.post(f"/v1/sessions/{sid}/messages", json={"content": "hi"}).status_code == 202
    assert read_events(c, sid)[-1].event == "done"
    return sid


def _held(c: httpx2.Client) -> tuple[str, str]:
    """A session whose turn waits for a permission answer: (session id, request id)."""
    sid = new_session(c)
    assert c.post(f"/v1/sessions/{sid}/messages", json={"content": "write"}).status_code == 202
    events = read_events(c, sid, until=lambda ev, _: ev.event == "permission_request")
    return sid, str(events[-1].data["request_id"])


def _wait_for(predicate: Callable[[], bool]) -> None:
    deadline = time.monotonic() + BOUND
    while not predicate():
        assert time.monotonic() < deadline, "state never reached"
        time.sleep(0.02)


def test_gc_under_a_running_turn_spares_it(
    fake_llm: FakeLLMServer, serve: Callable[..., Served], tmp_path: Path
) -> None:
    fake_llm.script(
        {"text": "Hello."}, {"text": "Writing.", "tool_calls": [WRITE]}, {"text": "Written."}
    )
    server = serve("--permission-mode", "ask")
    with server.client() as c:
        idle = _finished(c)
        busy, request = _held(c)
        gc = subprocess.run(
            [*DROVER, "gc", "--older-than", "0s", "--db", str(tmp_path / "journal.db")],
            capture_output=True,
            text=True,
            env=clean_env(),
            timeout=BOUND,
        )
        assert gc.returncode == 0, gc.stderr
        assert "deleted 1 session(s), 1 turn(s)" in gc.stdout, gc.stdout
        assert c.get(f"/v1/sessions/{idle}").status_code == 404
        snap = c.get(f"/v1/sessions/{busy}").json()
        assert snap["running_turn_id"] is not None
        # The turn goes on, and its work is all there.
        url = f"/v1/sessions/{busy}/permissions/{request}"
        assert c.post(url, json={"decision": "allow"}).status_code == 200
        assert read_events(c, busy)[-1].event == "done"
        (turn,) = c.get(f"/v1/sessions/{busy}").json()["turns"]
        assert turn["status"] == "completed"
        assert turn["tool_calls"][0]["state"] == "output-available"
    assert (tmp_path / "work" / "out.txt").read_text() == "hello"


def test_serve_prunes_on_its_retention_schedule(fake_llm: FakeLLMServer, tmp_path: Path) -> None:
    fake_llm.script({"text": "Writing.", "tool_calls": [WRITE]}, {"text": "Hello."})
    config = tmp_path / "config.toml"
    # A second: time enough to create a session and run its turn before it counts as old.
    config.write_text('[retention]\nolder_than = "1s"\nevery = "0.1s"\n', encoding="utf-8")
    env = clean_env(DROVER_CONFIG=str(config))
    server = start_server(fake_llm, tmp_path, "--permission-mode", "ask", env=env)
    try:
        with server.client() as c:
            busy, _ = _held(c)
            idle = _finished(c)
            _wait_for(lambda: c.get(f"/v1/sessions/{idle}").status_code == 404)
            # Idle longer than the idle one by now, but running: spared.
            snap = c.get(f"/v1/sessions/{busy}").json()
            assert snap["running_turn_id"] is not None and snap["pending_permissions"]
    finally:
        server.close()
