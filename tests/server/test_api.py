"""The HTTP API of a real ``drover serve``: turns that outlive clients, one turn per session,
interrupt, permissions (answered, and timing out with no client), clean SIGTERM, tokens."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import httpx2
from support.sse import sse_lines

from drover.core.messages import NOT_BLANK
from drover.server import openapi
from drover.testing.server import FakeLLMServer

from .support import BOUND, DROVER, TERMINAL, Served, clean_env, new_session, parse_sse, read_events

WRITE = {"name": "write_file", "input": {"path": "out.txt", "content": "hello"}}


def _until_permission(c: httpx2.Client, sid: str) -> dict[str, object]:
    events = read_events(c, sid, until=lambda ev, got: ev.event == "permission_request")
    return events[-1].data


def _wait_for(predicate: Callable[[], bool]) -> None:
    """Poll an observable state; the deadline is only a failure bound."""
    deadline = time.monotonic() + BOUND
    while not predicate():
        assert time.monotonic() < deadline, "state never reached"
        time.sleep(0.02)


def test_one_turn_per_session_and_the_permission_round_trip(
    fake_llm: FakeLLMServer, serve: Callable[..., Served], tmp_path: Path
) -> None:
    fake_llm.script({"text": "Writing.", "tool_calls": [WRITE]}, {"text": "Done writing."})
    server = serve("--permission-mode", "ask")
    with server.client() as c:
        sid = new_session(c)
        turn_id = c.post(f"/v1/sessions/{sid}/messages", json={"content": "write"}).json()[
            "turn_id"
        ]
        request = _until_permission(c, sid)
        busy = c.post(f"/v1/sessions/{sid}/messages", json={"content": "again"})
        assert busy.status_code == 409
        assert busy.json()["turn_id"] == turn_id
        assert busy.json()["error"]["code"] == "session_busy"
        snap = c.get(f"/v1/sessions/{sid}").json()
        assert snap["running_turn_id"] == turn_id
        assert [p["request_id"] for p in snap["pending_permissions"]] == [request["request_id"]]
        assert snap["turns"][0]["tool_calls"][0]["state"] == "awaiting-permission"
        url = f"/v1/sessions/{sid}/permissions/{request['request_id']}"
        answer = c.post(url, json={"decision": "allow"})
        assert answer.status_code == 200
        assert answer.json() == {"request_id": request["request_id"], "decision": "allow"}
        assert c.post(url, json={"decision": "allow"}).status_code == 404
        events = read_events(c, sid)
        assert events[-1].event == "done"
        snap = c.get(f"/v1/sessions/{sid}").json()
        assert snap["running_turn_id"] is None
        (turn,) = snap["turns"]
        assert turn["status"] == "completed"
        assert turn["tool_calls"][0]["state"] == "output-available"
    assert (tmp_path / "work" / "out.txt").read_text() == "hello"


def test_a_turn_runs_on_with_no_client_and_is_interrupted_by_endpoint(
    fake_llm: FakeLLMServer, serve: Callable[..., Served]
) -> None:
    fake_llm.script(
        {"text": "About to write.", "tool_calls": [WRITE]},
        {"text": "Resuming after the interruption."},
    )
    server = serve("--permission-mode", "ask")
    with server.client() as c:
        sid = new_session(c)
        assert c.post(f"/v1/sessions/{sid}/interrupt", json={}).status_code == 409
        turn_id = c.post(f"/v1/sessions/{sid}/messages", json={"content": "go"}).json()["turn_id"]
        # No client is connected: the turn still reaches its permission request.
        _wait_for(lambda: bool(c.get(f"/v1/sessions/{sid}").json()["pending_permissions"]))
        stop = c.post(f"/v1/sessions/{sid}/interrupt", json={})
        assert stop.status_code == 202
        assert stop.json() == {"turn_id": turn_id}
        events = read_events(c, sid)
        assert events[-1].data["reason"] == "interrupted"
        (turn,) = c.get(f"/v1/sessions/{sid}").json()["turns"]
        assert turn["status"] == "interrupted"
        assert turn["tool_calls"][0]["state"] == "interrupted"
        # The next message resumes the kept work (the fake checks the history it is sent).
        assert c.post(f"/v1/sessions/{sid}/messages", json={"content": "go on"}).status_code == 202
        assert read_events(c, sid, after=events[-1].id)[-1].event == "done"


def test_an_unanswered_permission_is_denied_after_the_timeout_once_clients_are_gone(
    fake_llm: FakeLLMServer, serve: Callable[..., Served]
) -> None:
    fake_llm.script({"text": "Asking.", "tool_calls": [WRITE]}, {"text": "It was refused."})
    server = serve("--permission-mode", "ask", "--permission-timeout", "0.5")
    with server.client() as c:
        sid = new_session(c)
        with c.stream("GET", f"/v1/sessions/{sid}/events") as stream:
            # Keep the iterator: closing it would close the connection.
            events = parse_sse(sse_lines(stream))
            for ev in events:
                if ev.event == "status":  # subscribed: now start the turn
                    c.post(f"/v1/sessions/{sid}/messages", json={"content": "go"})
                if ev.event == "permission_request":
                    break
            # A connected client holds the request open past the timeout.
            time.sleep(1.5)
            snap = c.get(f"/v1/sessions/{sid}").json()
            assert snap["pending_permissions"]
        _wait_for(lambda: c.get(f"/v1/sessions/{sid}").json()["turns"][0]["status"] != "running")
        (turn,) = c.get(f"/v1/sessions/{sid}").json()["turns"]
        assert turn["status"] == "completed"
        assert turn["tool_calls"][0]["state"] == "denied"


def test_sigterm_interrupts_running_turns_keeps_their_work_and_they_resume(
    fake_llm: FakeLLMServer, serve: Callable[..., Served]
) -> None:
    fake_llm.script(
        {"text": "Started the work.", "tool_calls": [WRITE]}, {"text": "Finished after restart."}
    )
    server = serve("--permission-mode", "ask")
    with server.client() as c:
        sid = new_session(c)
        c.post(f"/v1/sessions/{sid}/messages", json={"content": "go"})
        with c.stream("GET", f"/v1/sessions/{sid}/events") as stream:
            events = []
            for ev in parse_sse(sse_lines(stream)):
                events.append(ev)
                if ev.event == "permission_request":
                    server.proc.send_signal(signal.SIGTERM)
            # The stream ends after the turn's terminal event instead of hanging.
        assert events[-1].event in TERMINAL
        assert events[-1].data["reason"] == "interrupted"
        # Recorded as what happened: the server stopped, not the user.
        assert events[-1].data["error"] == "interrupted: drover serve stopped (SIGTERM)"
    assert server.proc.wait(timeout=BOUND) == 0
    assert not any("Traceback" in line for line in server.stderr)
    restarted = serve("--permission-mode", "allow")
    with restarted.client() as c:
        (turn,) = c.get(f"/v1/sessions/{sid}").json()["turns"]
        assert turn["status"] == "interrupted"
        assert turn["messages"][0]["message"]["content"][0]["text"] == "Started the work."
        assert c.post(f"/v1/sessions/{sid}/messages", json={"content": "go on"}).status_code == 202
        assert read_events(c, sid, after=events[-1].id)[-1].event == "done"


def test_tokens_own_their_sessions(fake_llm: FakeLLMServer, serve: Callable[..., Served]) -> None:
    server = serve("--token", "alpha-token", "--token", "beta-token")
    with server.client() as anon:
        reply = anon.get("/v1/sessions")
        assert reply.status_code == 401
        assert reply.json()["error"]["code"] == "unauthorized"
    with server.client("alpha-token") as alpha, server.client("beta-token") as beta:
        sid = new_session(alpha)
        assert [s["id"] for s in alpha.get("/v1/sessions").json()["sessions"]] == [sid]
        assert beta.get("/v1/sessions").json()["sessions"] == []
        assert beta.get(f"/v1/sessions/{sid}").status_code == 404
        assert beta.post(f"/v1/sessions/{sid}/messages", json={"content": "x"}).status_code == 404
        assert beta.post(f"/v1/sessions/{sid}/interrupt", json={}).status_code == 404
        assert beta.get(f"/v1/sessions/{sid}/events").status_code == 404
        assert alpha.get(f"/v1/sessions/{sid}").status_code == 200
    with server.client() as browser:  # EventSource cannot send headers
        with browser.stream("GET", f"/v1/sessions/{sid}/events?token=alpha-token") as stream:
            assert stream.status_code == 200
        assert browser.get(f"/v1/sessions/{sid}/events?token=beta-token").status_code == 404


def test_listening_beyond_loopback_needs_a_token(tmp_path: Path) -> None:
    done = subprocess.run(
        [*DROVER, "serve", "--host", "0.0.0.0", "--port", "0", "--db", str(tmp_path / "j.db")],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=BOUND,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "drover: error: listening on 0.0.0.0 needs a token: pass --token or set DROVER_TOKEN"
    ]


JSON = {"content-type": "application/json"}
LONE_HALF = b'{"content": "hi \\ud800 there"}'
LONE_TITLE = b'{"title": "\\udc00"}'
LONE_KEY = b'{"\\udc00": 1}'


def test_bad_requests_get_a_clear_4xx_with_a_json_error(
    fake_llm: FakeLLMServer, serve: Callable[..., Served]
) -> None:
    server = serve("--max-body", "1000")
    with server.client() as c:
        sid = new_session(c)
        msgs = f"/v1/sessions/{sid}/messages"
        cases = [
            (
                c.post(msgs, content=b"{not json", headers={"content-type": "application/json"}),
                400,
                "invalid_json",
            ),
            (c.post(msgs, json=["content"]), 422, "invalid_request"),
            (c.post(msgs, json={"content": "x", "extra": 1}), 422, "invalid_request"),
            (c.post(msgs, json={"content": "   "}), 422, "invalid_request"),
            (c.post(msgs, json={"content": 5}), 422, "invalid_request"),
            (c.post(msgs, json={}), 422, "invalid_request"),
            (
                c.post(msgs, content=b'{"content": "x"}', headers={"content-type": "text/plain"}),
                415,
                "unsupported_media_type",
            ),
            (c.post(msgs, json={"content": "x" * 2000}), 413, "body_too_large"),
            # No bytes is {}; white space is no JSON (the schema's fuzzer sends it).
            (
                c.post(
                    "/v1/sessions", content=b" \n", headers={"content-type": "application/json"}
                ),
                400,
                "invalid_json",
            ),
            (c.get(f"/v1/sessions/{sid}/events?after=-1"), 400, "invalid_request"),
            (
                c.get(f"/v1/sessions/{sid}/events", headers={"Last-Event-ID": "abc"}),
                400,
                "invalid_request",
            ),
            (c.get("/v1/sessions/nope"), 404, "not_found"),
            (c.get("/v1/sessions/a%2Fb"), 404, "not_found"),
            (c.get("/v1/nothing"), 404, "not_found"),
            (c.put(f"/v1/sessions/{sid}", json={}), 405, "method_not_allowed"),
            (
                c.post(f"/v1/sessions/{sid}/permissions/r1", json={"decision": "maybe"}),
                422,
                "invalid_request",
            ),
            (
                c.post(f"/v1/sessions/{sid}/permissions/r1", json={"decision": "allow"}),
                404,
                "not_found",
            ),
            (c.get("/v1/sessions?limit=0"), 400, "invalid_request"),
            # Half of a surrogate pair is no text: no journal could write it (it was a 500).
            (c.post(msgs, content=LONE_HALF, headers=JSON), 400, "invalid_json"),
            (c.patch(f"/v1/sessions/{sid}", content=LONE_TITLE, headers=JSON), 400, "invalid_json"),
            (c.post("/v1/sessions", content=LONE_KEY, headers=JSON), 400, "invalid_json"),
        ]
        for reply, status, code in cases:
            assert (reply.status_code, reply.json()["error"]["code"]) == (status, code), reply.text
            assert reply.json()["error"]["message"]
        # Nothing was written by the refused requests.
        assert c.get(f"/v1/sessions/{sid}").json()["turns"] == []
        assert "Traceback" not in "\n".join(server.stderr)
        # Both halves, as two escapes, are one character: taken.
        pair = b'{"title": "smile \\ud83d\\ude00"}'
        renamed = c.patch(f"/v1/sessions/{sid}", content=pair, headers=JSON)
        assert renamed.status_code == 200, renamed.text
        assert c.get(f"/v1/sessions/{sid}").json()["title"] == "smile \U0001f600"
        # CORS is off unless configured.
        plain = c.get("/v1/sessions", headers={"Origin": "http://page.example"})
        assert "access-control-allow-origin" not in plain.headers


def test_a_body_nested_past_the_decoders_stack_is_refused(
    fake_llm: FakeLLMServer, serve: Callable[..., Served]
) -> None:
    """Deeper than ``json`` can decode (it was a 500 from the RecursionError)."""
    server = serve()
    with server.client() as c:
        sid = new_session(c)
        deep = b"[" * 5000 + b"]" * 5000
        reply = c.post(f"/v1/sessions/{sid}/messages", content=deep, headers=JSON)
        assert (reply.status_code, reply.json()["error"]["code"]) == (400, "invalid_json")
        assert c.get(f"/v1/sessions/{sid}").json()["turns"] == []
    assert "Traceback" not in "\n".join(server.stderr)


#: Contents white space to Python's ``str.isspace`` (the providers drop such a text) or to the
#: ECMAScript ``\s`` a JSON Schema pattern means, but not to both: blank to the schema and the
#: route alike. And contents neither engine takes for white space.
SCHEMA_BLANK = ("\x1c\x1d\x1e\x1f", "\x85", " \x1f\u00a0", "\ufeff", "\u00a0\ufeff\u3000")
SCHEMA_NOT_BLANK = ("\x1fx\x1f", "\u200b", " \ufeff.")


def test_a_message_s_content_is_blank_exactly_as_its_schema_says(
    fake_llm: FakeLLMServer, serve: Callable[..., Served]
) -> None:
    post = openapi.schema()["paths"]["/v1/sessions/{session_id}/messages"]["post"]
    body = post["requestBody"]["content"]["application/json"]["schema"]
    assert body["properties"]["content"]["pattern"] == NOT_BLANK
    fake_llm.script({"text": "About to write.", "tool_calls": [WRITE]})
    server = serve("--permission-mode", "ask")
    with server.client() as c:
        sid = new_session(c)
        msgs = f"/v1/sessions/{sid}/messages"
        assert c.post(msgs, json={"content": "go"}).status_code == 202
        # A turn waits for permission: the messages below wait in the queue (no model call).
        _until_permission(c, sid)
        for text in SCHEMA_NOT_BLANK:
            reply = c.post(msgs, json={"content": text, "if_busy": "enqueue"})
            assert reply.status_code == 202, (text, reply.text)
            (queued,) = c.get(f"/v1/sessions/{sid}").json()["queued"]
            assert queued["content"] == text
            gone = c.delete(f"/v1/sessions/{sid}/queue/{queued['message_id']}")
            assert gone.status_code == 200
        for text in SCHEMA_BLANK:
            reply = c.post(msgs, json={"content": text, "if_busy": "enqueue"})
            assert reply.status_code == 422, (text, reply.text)
            assert reply.json()["error"]["code"] == "invalid_request"
        assert c.post(f"/v1/sessions/{sid}/interrupt", json={}).status_code == 202
        # Read to the turn's end: the events carry the contents sent above.
        assert read_events(c, sid, after=0)[-1].event in TERMINAL
        assert c.get(f"/v1/sessions/{sid}").json()["turns"][0]["status"] == "interrupted"


def test_heartbeats_and_the_transient_status_event(
    fake_llm: FakeLLMServer, serve: Callable[..., Served]
) -> None:
    server = serve("--heartbeat", "0.2", "--cors-origin", "http://page.example")
    with server.client() as c:
        sid = new_session(c)
        allowed = c.get("/v1/sessions", headers={"Origin": "http://page.example"})
        assert allowed.headers["access-control-allow-origin"] == "http://page.example"
        other = c.get("/v1/sessions", headers={"Origin": "http://elsewhere.example"})
        assert "access-control-allow-origin" not in other.headers
        lines: list[str] = []
        with c.stream("GET", f"/v1/sessions/{sid}/events") as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            for line in sse_lines(stream):
                lines.append(line)
                if line == ": ping":
                    break
    status = lines.index("event: status")
    assert not any(line.startswith("id:") for line in lines[:status])  # not replayable
    assert '"transient":true' in lines[status + 1]


def test_the_web_page_and_the_schema(fake_llm: FakeLLMServer, serve: Callable[..., Served]) -> None:
    server = serve()
    page = Path(__file__).parents[2] / "src" / "drover" / "server" / "static" / "index.html"
    with server.client() as c:
        reply = c.get("/")
        if page.is_file():
            assert reply.status_code == 200
            assert reply.content == page.read_bytes()
            assert reply.headers["content-type"].startswith("text/html")
        else:
            assert reply.status_code == 404
            assert reply.json()["error"]["message"] == "the web page is not installed"
        schema = c.get("/openapi.json").json()
    assert schema["openapi"].startswith("3.1")
    assert set(schema["paths"]) == {
        "/v1/sessions",
        "/v1/sessions/{session_id}",
        "/v1/sessions/{session_id}/messages",
        "/v1/sessions/{session_id}/interrupt",
        "/v1/sessions/{session_id}/fork",
        "/v1/sessions/{session_id}/rewind",
        "/v1/sessions/{session_id}/queue/{message_id}",
        "/v1/sessions/{session_id}/permissions",
        "/v1/sessions/{session_id}/permissions/{request_id}",
        "/v1/sessions/{session_id}/events",
        "/api/chat",
        "/api/chat/{chat_id}/stream",
        "/v1/responses",
        "/v1/responses/{response_id}",
        "/v1/responses/{response_id}/input_items",
        "/v1/responses/{response_id}/cancel",
        "/metrics",
    }
    assert set(schema["paths"]["/v1/sessions/{session_id}"]) == {"get", "patch", "delete"}
    assert set(schema["paths"]["/v1/responses/{response_id}"]) == {"get", "delete"}
