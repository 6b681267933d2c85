"""What a bad request is told, word for word, on every route that reads a body, a query string
or a header, over HTTP against a real ``drover serve``: the status, the code and the message
clients and tests rely on. Nothing here depends on how the server validates (hand-written
checks before, the routes' pydantic models since): the same table passes on both."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from typing import Any

from drover.testing.server import FakeLLMServer

from .support import Served, new_session

_TAKES = (
    "(drover takes model, input, stream, background, store, conversation, previous_response_id)"
)
_BIG = "x" * 200_001


def _user(*parts: Any, ident: Any = "u") -> dict[str, Any]:
    return {"id": ident, "role": "user", "parts": list(parts)}


def _text(text: Any) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _chat(*messages: Any, **extra: Any) -> dict[str, Any]:
    return {"id": "chat-1", "messages": list(messages), **extra}


def _respond(**body: Any) -> dict[str, Any]:
    return {"model": "any", "background": True, **body}


def _item(**fields: Any) -> dict[str, Any]:
    return {"role": "user", "content": "hi", **fields}


#: (method, path, JSON body, status, code, message); ``SID`` is a session's id.
BODIES: list[tuple[str, str, Any, int, str, str]] = [
    ("POST", "/v1/sessions", {"b": 1, "a": 2}, 422, "invalid_request", "unknown field: a"),
    ("POST", "/v1/sessions", [], 422, "invalid_request", "the body must be a JSON object"),
    ("PATCH", "SID", {}, 422, "invalid_request", "title is required"),
    ("PATCH", "SID", {"title": 5}, 422, "invalid_request", "title must be a str"),
    ("PATCH", "SID", {"title": " \t "}, 422, "invalid_request", "a title cannot be empty"),
    (
        "PATCH",
        "SID",
        {"title": "t" * 201},
        422,
        "invalid_request",
        "a title is at most 200 characters (201 given)",
    ),
    ("PATCH", "SID", {"title": "t", "x": 1}, 422, "invalid_request", "unknown field: x"),
    ("POST", "SID/messages", {}, 422, "invalid_request", "content must be a non-empty string"),
    (
        "POST",
        "SID/messages",
        {"content": " \u00a0\ufeff"},
        422,
        "invalid_request",
        "content must be a non-empty string",
    ),
    ("POST", "SID/messages", {"content": 5}, 422, "invalid_request", "content must be a str"),
    (
        "POST",
        "SID/messages",
        {"content": _BIG},
        413,
        "body_too_large",
        "content is over 200000 characters",
    ),
    (
        "POST",
        "SID/messages",
        {"content": "go", "if_busy": "later"},
        422,
        "invalid_request",
        "if_busy must be one of reject, enqueue, interrupt, rollback",
    ),
    (
        "POST",
        "SID/messages",
        {"content": "go", "if_busy": 1},
        422,
        "invalid_request",
        "if_busy must be a str",
    ),
    (
        "POST",
        "SID/messages",
        {"content": "go", "webhook": None},
        422,
        "invalid_request",
        "webhook must be a str",
    ),
    (
        "POST",
        "SID/permissions/r1",
        {},
        422,
        "invalid_request",
        "decision must be one of allow, always, deny",
    ),
    (
        "POST",
        "SID/permissions/r1",
        {"decision": "maybe"},
        422,
        "invalid_request",
        "decision must be one of allow, always, deny",
    ),
    (
        "POST",
        "SID/permissions/r1",
        {"decision": 1},
        422,
        "invalid_request",
        "decision must be a str",
    ),
    ("POST", "SID/fork", {"turn_id": None}, 422, "invalid_request", "turn_id must be a str"),
    ("POST", "SID/rewind", {}, 422, "invalid_request", "turn_id is required"),
    ("POST", "SID/rewind", {"turn_id": 1}, 422, "invalid_request", "turn_id must be a str"),
    (
        "POST",
        "SID/rewind",
        {"turn_id": "t", "files": "yes"},
        422,
        "invalid_request",
        "files must be a bool",
    ),
    ("POST", "SID/interrupt", {"x": 1}, 422, "invalid_request", "unknown field: x"),
    # The AI SDK's door.
    (
        "POST",
        "/api/chat",
        {"messages": [_user(_text("go"))]},
        422,
        "invalid_request",
        "id must be 1-128 letters, digits, - and _ (the chat's session id)",
    ),
    (
        "POST",
        "/api/chat",
        _chat(_user(_text("go")), id=5),
        422,
        "invalid_request",
        "id must be a str",
    ),
    (
        "POST",
        "/api/chat",
        _chat(_user(_text("go")), trigger="regenerate-message"),
        422,
        "invalid_request",
        "regenerate-message is not supported: drover keeps every turn",
    ),
    (
        "POST",
        "/api/chat",
        _chat(_user(_text("go")), trigger="other"),
        422,
        "invalid_request",
        "trigger must be submit-message",
    ),
    (
        "POST",
        "/api/chat",
        _chat(_user(_text("go")), trigger=5),
        422,
        "invalid_request",
        "trigger must be a str",
    ),
    (
        "POST",
        "/api/chat",
        {"id": "c", "messages": "x"},
        422,
        "invalid_request",
        "messages must be a list",
    ),
    (
        "POST",
        "/api/chat",
        {"id": "c"},
        422,
        "invalid_request",
        "messages must be a non-empty list of UI messages",
    ),
    (
        "POST",
        "/api/chat",
        _chat(),
        422,
        "invalid_request",
        "messages must be a non-empty list of UI messages",
    ),
    ("POST", "/api/chat", _chat(5), 422, "invalid_request", "message 1 is not an object"),
    (
        "POST",
        "/api/chat",
        _chat({"id": "s", "role": "system", "parts": 5}),
        422,
        "invalid_request",
        "message 1: system messages are not taken (the agent has its own)",
    ),
    (
        "POST",
        "/api/chat",
        _chat({"id": "s", "role": "tool", "parts": []}),
        422,
        "invalid_request",
        "message 1: role must be user or assistant",
    ),
    (
        "POST",
        "/api/chat",
        _chat({"role": "user", "parts": [5]}),
        422,
        "invalid_request",
        "message 1: parts must be a list of objects",
    ),
    (
        "POST",
        "/api/chat",
        _chat({"role": "assistant", "parts": []}),
        422,
        "invalid_request",
        "message 1: id must be a string",
    ),
    (
        "POST",
        "/api/chat",
        _chat(_user({"type": "file", "url": "data:,x"})),
        422,
        "invalid_request",
        "message 1: only text parts are taken, not 'file'",
    ),
    (
        "POST",
        "/api/chat",
        _chat(_user(_text(5))),
        422,
        "invalid_request",
        "message 1: only text parts are taken, not 'text'",
    ),
    (
        "POST",
        "/api/chat",
        _chat(_user(_text(" "), {"type": "data-x", "data": 1})),
        422,
        "invalid_request",
        "message 1: the user message has no text",
    ),
    (
        "POST",
        "/api/chat",
        _chat(_user(_text(_BIG))),
        413,
        "body_too_large",
        "message 1 is over 200000 characters",
    ),
    (
        "POST",
        "/api/chat",
        _chat(_user(_text("go")), model="x"),
        422,
        "invalid_request",
        "unknown field: model",
    ),
    # The Responses door.
    (
        "POST",
        "/v1/responses",
        {"input": "hi"},
        422,
        "invalid_request",
        "model is required (any name: the server's agent runs the turn)",
    ),
    (
        "POST",
        "/v1/responses",
        _respond(model=7, input="hi"),
        422,
        "invalid_request",
        "model must be a string",
    ),
    (
        "POST",
        "/v1/responses",
        _respond(input="hi", temperature=0.2),
        422,
        "invalid_request",
        f"temperature 0.2 is not supported: the server's agent sets its model's sampling {_TAKES}",
    ),
    (
        "POST",
        "/v1/responses",
        _respond(input="hi", tools=[{"type": "function", "name": "f", "parameters": {}}]),
        422,
        "invalid_request",
        "tools [{'type': 'function', 'name': 'f', 'par… is not supported: drover's agent runs "
        f"its own tools; a client's are not taken {_TAKES}",
    ),
    (
        "POST",
        "/v1/responses",
        _respond(input="hi", top_logprobs=False),
        422,
        "invalid_request",
        f"top_logprobs False is not supported: drover sends no logprobs {_TAKES}",
    ),
    (
        "POST",
        "/v1/responses",
        _respond(input="hi", parallel_tool_calls=1),
        422,
        "invalid_request",
        f"parallel_tool_calls 1 is not supported: drover runs a model's calls in parallel {_TAKES}",
    ),
    (
        "POST",
        "/v1/responses",
        _respond(input="hi", text={"format": {"type": "json_object"}}),
        422,
        "invalid_request",
        "text {'format': {'type': 'json_object'}} is not supported: drover answers in plain "
        f"text {_TAKES}",
    ),
    (
        "POST",
        "/v1/responses",
        _respond(input="hi", store=False),
        422,
        "invalid_request",
        "store must be true: drover's journal keeps every response",
    ),
    (
        "POST",
        "/v1/responses",
        _respond(input="hi", stream="yes"),
        422,
        "invalid_request",
        "stream must be true or false",
    ),
    (
        "POST",
        "/v1/responses",
        _respond(input="hi", background=1),
        422,
        "invalid_request",
        "background must be true or false",
    ),
    (
        "POST",
        "/v1/responses",
        _respond(input="hi", previous_response_id=5),
        422,
        "invalid_request",
        "previous_response_id must be a response id",
    ),
    (
        "POST",
        "/v1/responses",
        _respond(input="hi", conversation=5),
        422,
        "invalid_request",
        'conversation must be a conversation id or {"id": ...}',
    ),
    (
        "POST",
        "/v1/responses",
        _respond(input="hi", conversation={"id": "c", "x": 1}),
        422,
        "invalid_request",
        'conversation must be a session id (or {"id": ...})',
    ),
    (
        "POST",
        "/v1/responses",
        _respond(input="hi", conversation="c", previous_response_id="resp_x"),
        422,
        "invalid_request",
        "give previous_response_id or conversation, not both",
    ),
    (
        "POST",
        "/v1/responses",
        _respond(input="hi", stream_options={"x": True}),
        422,
        "invalid_request",
        "stream_options takes only include_obfuscation, true or false",
    ),
    (
        "POST",
        "/v1/responses",
        _respond(input="hi", stream_options=5),
        422,
        "invalid_request",
        "stream_options must be an object",
    ),
    (
        "POST",
        "/v1/responses",
        _respond(input="hi", temperatur=1),
        422,
        "invalid_request",
        "unknown field: temperatur",
    ),
    (
        "POST",
        "/v1/responses",
        _respond(input=5),
        422,
        "invalid_request",
        "input must be a string or a list of items",
    ),
    (
        "POST",
        "/v1/responses",
        _respond(input=None),
        422,
        "invalid_request",
        "input must be a non-empty string or a list of items",
    ),
    (
        "POST",
        "/v1/responses",
        _respond(input=[]),
        422,
        "invalid_request",
        "input must be a non-empty string or a list of items",
    ),
    (
        "POST",
        "/v1/responses",
        _respond(input=" \x1f"),
        422,
        "invalid_request",
        "input must be a non-empty string or a user message",
    ),
    (
        "POST",
        "/v1/responses",
        _respond(input=_BIG),
        413,
        "body_too_large",
        "input is over 200000 characters",
    ),
    (
        "POST",
        "/v1/responses",
        _respond(input=[_item(), 5]),
        422,
        "invalid_request",
        "input item 2 is not an object",
    ),
    (
        "POST",
        "/v1/responses",
        _respond(input=[{"type": "function_call_output", "call_id": "c", "output": "x"}]),
        422,
        "invalid_request",
        "input item 1: function_call_output items are not taken (drover runs its own tools and "
        "keeps its own history)",
    ),
    (
        "POST",
        "/v1/responses",
        _respond(input=[_item(role="developer")]),
        422,
        "invalid_request",
        "input item 1: developer messages are not taken (the agent has its own)",
    ),
    (
        "POST",
        "/v1/responses",
        _respond(input=[_item(role="tool")]),
        422,
        "invalid_request",
        "input item 1: role must be user or assistant",
    ),
    (
        "POST",
        "/v1/responses",
        _respond(input=[_item(extra=1, another=2)]),
        422,
        "invalid_request",
        "unsupported field in input item 1: another",
    ),
    (
        "POST",
        "/v1/responses",
        _respond(input=[_item(status=5)]),
        422,
        "invalid_request",
        "input item 1: a user message's id and status are strings",
    ),
    (
        "POST",
        "/v1/responses",
        _respond(input=[_item(content=[{"type": "input_image", "image_url": "x"}])]),
        422,
        "invalid_request",
        "input item 1: only input_text content is taken, not 'input_image'",
    ),
    (
        "POST",
        "/v1/responses",
        _respond(input=[_item(content=[{"type": "input_text", "text": "x", "y": 1}])]),
        422,
        "invalid_request",
        'input item 1: an input_text part is {"type": "input_text", "text"}',
    ),
    (
        "POST",
        "/v1/responses",
        _respond(input=[_item(content=[])]),
        422,
        "invalid_request",
        "input item 1 must be a non-empty string or a user message",
    ),
    (
        "POST",
        "/v1/responses",
        _respond(input=[_item(content=[{"type": "input_text", "text": " "}])]),
        422,
        "invalid_request",
        "input item 1 must be a non-empty string or a user message",
    ),
    (
        "POST",
        "/v1/responses",
        _respond(input=[{"role": "user"}]),
        422,
        "invalid_request",
        "input item 1 must be a non-empty string or a user message",
    ),
    (
        "POST",
        "/v1/responses",
        _respond(input=[_item(content=_BIG)]),
        413,
        "body_too_large",
        "input item 1 is over 200000 characters",
    ),
    (
        "POST",
        "/v1/responses",
        _respond(input=[{"type": "mcp_call"}]),
        422,
        "invalid_request",
        "input item 1: an mcp_call item has its id",
    ),
    (
        "POST",
        "/v1/responses",
        _respond(input=[{"role": "assistant", "content": "a"}]),
        409,
        "no_new_message",
        "the input ends with an answer: drover answers a new user message, at the input's end "
        "(the items before it are the conversation's)",
    ),
]

#: (path with its query string, headers, status, message) of GET requests (400, invalid_request).
QUERIES: list[tuple[str, dict[str, str], str]] = [
    ("/v1/sessions?limit=0", {}, "limit must be between 1 and 200"),
    ("/v1/sessions?limit=201", {}, "limit must be between 1 and 200"),
    ("/v1/sessions?limit=%2B5", {}, "limit must be a whole number ≥ 0"),
    ("/v1/sessions?limit=x", {}, "limit must be a whole number ≥ 0"),
    ("SID/events?after=-1", {}, "after must be a whole number ≥ 0"),
    ("SID/events", {"Last-Event-ID": "x"}, "Last-Event-ID must be a whole number ≥ 0"),
    ("RESPONSE?stream=maybe", {}, "stream must be true or false"),
    ("RESPONSE?stream=true&starting_after=-1", {}, "starting_after must be a whole number ≥ 0"),
    ("RESPONSE/input_items?limit=0", {}, "limit must be a whole number from 1 to 100"),
    ("RESPONSE/input_items?limit=101", {}, "limit must be a whole number from 1 to 100"),
    ("RESPONSE/input_items?order=up", {}, "order must be asc or desc"),
]


def _where(path: str, sid: str, response: str) -> str:
    return path.replace("SID", f"/v1/sessions/{sid}").replace(
        "RESPONSE", f"/v1/responses/{response}"
    )


def test_every_refusal_says_what_it_said(
    fake_llm: FakeLLMServer, serve: Callable[..., Served]
) -> None:
    fake_llm.script({"text": "Hello."})
    server = serve()
    with server.client() as c:
        sid = new_session(c)
        made = c.post("/v1/responses", json=_respond(input="hi", background=False))
        assert made.status_code == 200, made.text
        response = made.json()["id"]
        told = []
        for method, path, body, *_ in BODIES:
            reply = c.request(method, _where(path, sid, response), json=body)
            error = reply.json().get("error", {})
            told.append((method, path, reply.status_code, error.get("code"), error.get("message")))
        assert told == [(b[0], b[1], b[3], b[4], b[5]) for b in BODIES]
        queried = []
        for path, headers, _ in QUERIES:
            reply = c.get(_where(path, sid, response), headers=headers)
            queried.append((path, reply.status_code, reply.json()["error"]))
        expected = [
            (path, 400, {"code": "invalid_request", "message": message})
            for path, _, message in QUERIES
        ]
        assert queried == expected
        empty = c.delete(f"/v1/sessions/{sid}/permissions", params={"rule": " "})
        assert (empty.status_code, empty.json()["error"]["message"]) == (
            400,
            "rule must not be empty",
        )
        # Nothing refused left a trace: one session with no turn, one response.
        assert [s["id"] for s in c.get("/v1/sessions").json()["sessions"]] == [
            made.json()["conversation"]["id"],
            sid,
        ]
        assert c.get(f"/v1/sessions/{sid}").json()["turns"] == []


def test_a_client_s_bodies_are_taken(fake_llm: FakeLLMServer, serve: Callable[..., Served]) -> None:
    """What a valid body may hold — every optional field, null where the API says so — is
    taken: the other side of the refusals above."""
    fake_llm.script({"text": "One."}, {"text": "Two."})
    server = serve()
    with server.client() as c:
        sid = new_session(c)
        renamed = c.patch(f"/v1/sessions/{sid}", json={"title": "  a   title  "})
        assert renamed.json()["title"] == "a title"
        first = c.post(
            "/api/chat", json=_chat(_user(_text("go"), {"type": "data-x"}), messageId="m")
        )
        assert first.status_code == 200, first.text
        taken = c.post(
            "/v1/responses",
            json=_respond(
                input=[_item(id="a", status="completed", type="message")],
                stream=None,
                conversation=None,
                previous_response_id=None,
                stream_options={"include_obfuscation": False},
                text={"format": {"type": "text"}, "verbosity": None},
                top_logprobs=0.0,
            ),
        )
        assert taken.status_code == 200, taken.text


def _schema_takes(schema: dict[str, Any], text: str) -> bool:
    """Whether a string schema (length and pattern) takes ``text``."""
    return (
        schema.get("minLength", 0) <= len(text) <= schema.get("maxLength", len(text))
        and re.search(schema.get("pattern", ""), text) is not None
    )


def test_white_space_is_refused_exactly_as_the_schema_says(
    fake_llm: FakeLLMServer, serve: Callable[..., Served]
) -> None:
    """A title or a rule of white space only is refused, and the schema says so: each is taken
    exactly when its schema takes it (a white space of Python's, of ECMAScript's only, none; a
    title longer than the schema's limit even where its white space runs would shrink it)."""
    server = serve()
    with server.client() as c:
        sid = new_session(c)
        paths = c.get("/openapi.json").json()["paths"]["/v1/sessions/{session_id}"]
        title = paths["patch"]["requestBody"]["content"]["application/json"]["schema"]
        title = title["properties"]["title"]
        (rule,) = [
            p["schema"]
            for p in c.get("/openapi.json").json()["paths"][
                "/v1/sessions/{session_id}/permissions"
            ]["delete"]["parameters"]
            if p["name"] == "rule"
        ]
        spaces = [chr(i) for i in range(sys.maxunicode + 1) if chr(i).isspace()]
        texts = [char * 2 for char in [*spaces, "\ufeff", "\u200b", "a"]]
        for text in [*texts, "a" + " " * 300 + "b"]:
            renamed = c.patch(f"/v1/sessions/{sid}", json={"title": text})
            assert renamed.status_code in (200, 422), renamed.text
            assert (renamed.status_code == 200) is _schema_takes(title, text), repr(text)
        for text in texts:
            revoked = c.delete(f"/v1/sessions/{sid}/permissions", params={"rule": text})
            assert revoked.status_code in (200, 400), revoked.text
            assert (revoked.status_code == 200) is _schema_takes(rule, text), repr(text)
