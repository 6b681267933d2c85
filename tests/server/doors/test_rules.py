"""What both doors refuse, over plain HTTP against a real ``drover serve``: the chat's history
must agree with the session, the Responses door takes only what maps to a drover turn, and
both keep the server's rules — Host and Origin, JSON bodies, tokens (a session belongs to the
token that made it)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import pytest
from support.mcp_servers import require_node

from drover.core.messages import NOT_BLANK, blank
from drover.testing.server import FakeLLMServer

from ..support import Served
from .support import Gate, gated_turn
from .support import refused as _refused


def _user(text: str, ident: str = "u") -> dict[str, Any]:
    return {"id": ident, "role": "user", "parts": [{"type": "text", "text": text}]}


def _answer(ident: str) -> dict[str, Any]:
    return {"id": ident, "role": "assistant", "parts": [{"type": "text", "text": "…"}]}


def _chunks(reply: httpx2.Response) -> list[dict[str, Any]]:
    assert reply.status_code == 200, reply.text
    assert reply.headers["x-vercel-ai-ui-message-stream"] == "v1"
    lines = [line.removeprefix("data: ") for line in reply.text.split("\n\n") if line]
    assert lines[-1] == "[DONE]"
    return [json.loads(line) for line in lines[:-1]]


def _chat(c: httpx2.Client, chat: str, *messages: dict[str, Any], **extra: Any) -> httpx2.Response:
    return c.post("/api/chat", json={"id": chat, "messages": list(messages), **extra})


def test_a_chat_s_earlier_messages_must_be_the_session_s(
    fake_llm: FakeLLMServer, serve: Callable[..., Served]
) -> None:
    fake_llm.script({"text": "One."}, {"text": "Two."}, {"text": "Three."})
    server = serve()
    with server.client() as c:
        first = _chunks(_chat(c, "chat-a", _user("first")))
        one = first[0]["messageId"]
        assert first[-1] == {"type": "finish", "finishReason": "stop"}
        # Only the last message is new; the others are the chat's, in order.
        _refused(_chat(c, "chat-a", _user("second")), 409, "history_mismatch", "1 more")
        _refused(
            _chat(c, "chat-a", _user("other"), _answer(one), _user("second")),
            409,
            "history_mismatch",
            "message 1",
        )
        _refused(
            _chat(c, "chat-a", _user("first"), _answer("not-an-answer"), _user("second")),
            409,
            "history_mismatch",
            "message 2",
        )
        # An answer the client never got may be missing; the ones it has carry their ids.
        two = _chunks(_chat(c, "chat-a", _user("first"), _user("second")))[0]["messageId"]
        history = [_user("first"), _answer(one), _user("second"), _answer(two)]
        assert _chunks(_chat(c, "chat-a", *history, _user("third")))[-1]["type"] == "finish"
        # A new chat starts with its first message.
        _refused(_chat(c, "chat-b", _user("x"), _user("y")), 409, "history_mismatch")
        assert c.get("/api/chat/chat-b/stream").status_code == 204
        turns = c.get("/v1/sessions/chat-a").json()["turns"]
        texts = [t["user_message"]["content"][0]["text"] for t in turns]
        assert texts == ["first", "second", "third"]


def test_a_chat_takes_only_what_it_can_run(
    fake_llm: FakeLLMServer, serve: Callable[..., Served], tmp_path: Path
) -> None:
    gate = Gate(tmp_path / "work")
    fake_llm.script(*gated_turn("Waiting."))
    server = serve()
    with server.client() as c:
        _refused(
            _chat(c, "c1", _user("go"), trigger="regenerate-message"),
            422,
            "invalid_request",
            "regenerate",
        )
        system = {"id": "s", "role": "system", "parts": [{"type": "text", "text": "be terse"}]}
        _refused(_chat(c, "c1", system, _user("go")), 422, "invalid_request", "system")
        picture = {"id": "u", "role": "user", "parts": [{"type": "file", "url": "data:,x"}]}
        _refused(_chat(c, "c1", picture), 422, "invalid_request", "only text parts")
        _refused(_chat(c, "c1", _user("go"), model="x"), 422, "invalid_request", "model")
        _refused(_chat(c, "no/such", _user("go")), 422, "invalid_request", "id must be")
        _refused(_chat(c, "c1", _user(" ")), 422, "invalid_request", "no text")
        plain = c.post("/api/chat", content=b"{}", headers={"Content-Type": "text/plain"})
        _refused(plain, 415, "unsupported_media_type")
        with c.stream("POST", "/api/chat", json={"id": "c1", "messages": [_user("go")]}) as running:
            assert running.status_code == 200
            busy = _chat(c, "c1", _user("go"), _answer("x"), _user("again"))
            assert busy.status_code == 409  # (the history check comes first)
            turn = c.get("/v1/sessions/c1").json()["running_turn_id"]
            answer = {**_answer(turn)}
            _refused(_chat(c, "c1", _user("go"), answer, _user("again")), 409, "session_busy")
            # The chat's answer, sent back with no approval in it, asks for nothing.
            _refused(_chat(c, "c1", _user("go"), answer), 409, "no_approval")
            gate.open()
            assert "".join(running.iter_text()).endswith("data: [DONE]\n\n")


def test_a_chat_belongs_to_its_token_and_keeps_the_server_s_rules(
    fake_llm: FakeLLMServer, serve: Callable[..., Served], tmp_path: Path
) -> None:
    gate = Gate(tmp_path / "work")
    fake_llm.script(*gated_turn("Waiting."))
    server = serve("--token", "alice", "--token", "bob")
    with server.client("alice") as alice, server.client("bob") as bob:
        with alice.stream("POST", "/api/chat", json={"id": "c2", "messages": [_user("go")]}) as r:
            assert r.status_code == 200
            with alice.stream("GET", "/api/chat/c2/stream") as resumed:
                assert resumed.status_code == 200
            # Another token's chat is as good as none: no stream, no new message.
            assert bob.get("/api/chat/c2/stream").status_code == 204
            _refused(_chat(bob, "c2", _user("mine now")), 404, "not_found")
            with server.client() as anonymous:
                _refused(_chat(anonymous, "c3", _user("go")), 401, "unauthorized")
                assert anonymous.get("/api/chat/c2/stream").status_code == 401
            foreign = {"Origin": "http://evil.example"}
            _refused(
                alice.post(
                    "/api/chat", json={"id": "c3", "messages": [_user("go")]}, headers=foreign
                ),
                403,
                "forbidden_origin",
            )
            _refused(alice.get("/api/chat/c2/stream", headers=foreign), 403, "forbidden_origin")
            rebound = {"Host": "rebound.example"}
            _refused(alice.get("/api/chat/c2/stream", headers=rebound), 421, "misdirected_request")
            gate.open()
            assert "".join(r.iter_text()).endswith("data: [DONE]\n\n")
        assert alice.get("/api/chat/c2/stream").status_code == 204


def _respond(c: httpx2.Client, **body: Any) -> httpx2.Response:
    return c.post("/v1/responses", json={"model": "any", "background": True, **body})


def test_the_responses_door_takes_only_what_maps_to_a_turn(
    fake_llm: FakeLLMServer, serve: Callable[..., Served]
) -> None:
    fake_llm.script({"text": "Hello."}, {"text": "Again."})
    server = serve("--token", "alice", "--token", "bob")
    with server.client("alice") as c, server.client("bob") as bob:
        tool = {"type": "function", "name": "f", "parameters": {}}
        for name, value in [("instructions", "be terse"), ("tools", [tool]), ("temperature", 0.2)]:
            _refused(_respond(c, input="hi", **{name: value}), 422, "invalid_request", name)
        _refused(_respond(c, input="hi", store=False), 422, "invalid_request", "store")
        said = [{"role": "assistant", "content": "a"}]
        _refused(_respond(c, input=said), 409, "no_new_message", "ends with an answer")
        output = [{"type": "function_call_output", "call_id": "c", "output": "x"}]
        _refused(_respond(c, input=output), 422, "invalid_request", "function_call_output")
        image = [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]
        _refused(_respond(c, input=image), 422, "invalid_request", "input_text")
        _refused(
            _respond(c, input="hi", conversation="c", previous_response_id="resp_x"),
            422,
            "invalid_request",
            "not both",
        )
        _refused(_respond(c, input="hi", conversation="nope"), 404, "not_found")
        _refused(_respond(c, input="hi", previous_response_id="resp_nope"), 404, "not_found")
        plain = c.post("/v1/responses", content=b"{}", headers={"Content-Type": "text/plain"})
        _refused(plain, 415, "unsupported_media_type")

        created = _respond(c, input=[{"type": "message", "role": "user", "content": "hi"}])
        assert created.status_code == 200, created.text
        response = created.json()
        assert response["id"].startswith("resp_") and response["object"] == "response"
        session = response["conversation"]["id"]
        path = f"/v1/responses/{response['id']}"
        _refused(c.get(path, params={"stream": "maybe"}), 400, "invalid_request")
        _refused(
            c.get(path, params={"stream": "true", "starting_after": "-1"}), 400, "invalid_request"
        )
        # Another token sees nothing of it.
        for reply in (
            bob.get(path),
            bob.get(f"{path}/input_items"),
            bob.delete(path),
            bob.post(f"{path}/cancel", json={}),
            _respond(bob, input="hi", previous_response_id=response["id"]),
            _respond(bob, input="hi", conversation=session),
        ):
            _refused(reply, 404, "not_found")
        _refused(c.get("/v1/responses/resp_unknown"), 404, "not_found")
        _refused(c.get("/v1/responses/not-a-response"), 404, "not_found")
        with c.stream("GET", path, params={"stream": "true"}) as events:
            assert events.status_code == 200
            assert "".join(events.iter_text()).endswith("data: [DONE]\n\n")
        # The conversation goes on by its id as well.
        again = _respond(c, input="and again", conversation={"id": session})
        assert again.status_code == 200, again.text
        assert again.json()["conversation"]["id"] == session
        assert again.json()["previous_response_id"] == response["id"]


@pytest.mark.parametrize(
    ("text", "is_blank"),
    [
        ("", True),
        (" \t\r\n\v\f", True),
        ("\u00a0\u2003\u3000\ufeff", True),
        # White space to Python (the providers drop such a text as empty), not to ECMAScript:
        # the fuzzer found a 422 for "\x1f\x1f" when the schema said \S; now both refuse it.
        ("\x1f\x1f", True),
        ("\x1c\x85", True),
        ("\u200b", False),
        ("  a  ", False),
    ],
)
def test_blank_is_what_the_schemas_pattern_says(text: str, is_blank: bool) -> None:
    assert blank(text) is is_blank


def test_the_schemas_pattern_and_blank_agree_for_python_and_ecmascript() -> None:
    """Every character white space to either engine is blank, whichever engine reads the
    schema's pattern (a JavaScript client's validator, or Python's)."""
    require_node()
    python = {chr(i) for i in range(sys.maxunicode + 1) if chr(i).isspace()}
    ecmascript = json.loads(
        subprocess.run(
            ["node", "-e", _SPACES_IN_JS],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
    )
    assert "\ufeff" in ecmascript and "\x1c" in python  # where the two engines differ
    samples = sorted(python | set(ecmascript) | {"a", "\u200b", "\x00", "é"})
    matched_in_js = json.loads(
        subprocess.run(
            ["node", "-e", _MATCHES_IN_JS, NOT_BLANK, json.dumps(samples)],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
    )
    for char, in_js in zip(samples, matched_in_js, strict=True):
        spaced = char in python or char in ecmascript
        assert blank(char) is spaced, hex(ord(char))
        assert (re.search(NOT_BLANK, char) is None) is spaced, hex(ord(char))
        assert (not in_js) is spaced, hex(ord(char))


#: Every character of the Basic Multilingual Plane ECMAScript's ``\s`` matches, as a JSON list.
_SPACES_IN_JS = """
const out = [];
for (let i = 0; i <= 0xffff; i++) {
  const c = String.fromCharCode(i);
  if (/\\s/.test(c)) out.push(c);
}
console.log(JSON.stringify(out));
"""
#: Whether the pattern (argv 1) matches each text of a JSON list (argv 2), with ECMAScript's
#: rules (``u``: as JSON Schema validators built on JavaScript read patterns).
_MATCHES_IN_JS = """
const pattern = new RegExp(process.argv[1], "u");
console.log(JSON.stringify(JSON.parse(process.argv[2]).map((t) => pattern.test(t))));
"""
