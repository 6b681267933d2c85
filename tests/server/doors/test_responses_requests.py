"""What ``POST /v1/responses`` takes, over plain HTTP against a real ``drover serve``: the
values the frameworks send by default and every other no-op value of the API's fields are
taken, any value that would change the agent is refused naming its field; a history sent
back is taken when it is the conversation's own — found by its items' ids, or named — and
refused otherwise; a POST with no body at all on a route that takes none is ``{}``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import pytest

from drover.testing.server import FakeLLMServer

from ..support import Served
from .support import Gate, gated_turn
from .support import refused as _refused

#: Every no-op value the door takes — the Agents SDK's ``include: []`` and ``tools: []``, and
#: the rest — with null for each field the API has (its "not given").
NO_OPS: dict[str, Any] = {
    "include": ["reasoning.encrypted_content"],
    "tools": [],
    "tool_choice": "auto",
    "parallel_tool_calls": True,
    "store": True,
    "metadata": {},
    "user": "someone",
    "safety_identifier": "someone",
    "prompt_cache_key": "key",
    "prompt_cache_retention": "24h",
    "truncation": "auto",
    "reasoning": {"effort": None, "summary": None},
    "text": {"format": {"type": "text"}},
    "service_tier": "default",
    "top_logprobs": 0,
    "stream_options": {"include_obfuscation": False},
    **dict.fromkeys(
        [
            "instructions",
            "max_output_tokens",
            "max_tool_calls",
            "temperature",
            "top_p",
            "prompt",
            "context_management",
            "moderation",
            "background_options",
            "prompt_cache_options",
            "access_programs",
            "image",
            "conversation",
            "previous_response_id",
            "background",
            "stream",
        ]
    ),
}
#: A value of each field that would change what drover's agent does, or what it keeps.
REFUSED: list[tuple[str, Any]] = [
    ("include", ["message.output_text.logprobs"]),
    ("tools", [{"type": "function", "name": "f", "parameters": {}}]),
    ("tool_choice", "required"),
    ("parallel_tool_calls", False),
    ("max_tool_calls", 3),
    ("instructions", "be terse"),
    ("max_output_tokens", 100),
    ("temperature", 0.2),
    ("top_p", 0.5),
    ("top_logprobs", 2),
    ("reasoning", {"effort": "high"}),
    ("text", {"format": {"type": "json_object"}}),
    ("text", {"verbosity": "low"}),
    ("truncation", "disabled"),
    ("metadata", {"k": "v"}),
    ("service_tier", "flex"),
    ("prompt", {"id": "p"}),
    ("context_management", [{"type": "compaction"}]),
    ("store", False),
    ("user", 3),
    ("stream", "yes"),
    ("background", 1),
    ("model", 7),
]


def _respond(c: httpx2.Client, **body: Any) -> httpx2.Response:
    return c.post("/v1/responses", json={"model": "any", **body})


def test_no_op_values_are_taken_and_the_others_refused_by_name(
    fake_llm: FakeLLMServer, serve: Callable[..., Served]
) -> None:
    fake_llm.script({"text": "Taken."})
    server = serve()
    with server.client() as c:
        for name, value in REFUSED:
            _refused(_respond(c, input="hi", **{name: value}), 422, "invalid_request", name)
        _refused(_respond(c, input="hi", temperatur=0.2), 422, "invalid_request", "unknown field")
        taken = _respond(c, input="hi", **NO_OPS)
        assert taken.status_code == 200, taken.text
        response = taken.json()
        assert response["status"] == "completed" and response["output"][0]["type"] == "message"
        assert isinstance(response["created_at"], int)


def _message(role: str, text: str, ident: str | None = None) -> dict[str, Any]:
    """An input message, as the Agents SDK's ``to_input_list()`` holds one."""
    item: dict[str, Any] = {"type": "message", "role": role, "content": text}
    if role == "assistant":
        content = [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
        item.update(content=content, status="completed")
    if ident is not None:
        item["id"] = ident
    return item


def _history(response: dict[str, Any], asked: str) -> list[dict[str, Any]]:
    """The history a client holds after ``response`` (asked with ``asked``): the items it got
    back, with their ids."""
    items = [_message("user", asked)]
    for item in response["output"]:
        if item["type"] == "message":
            text = item["content"][0]["text"]
            items.append(_message("assistant", text, item["id"]))
        else:
            items.append({k: v for k, v in item.items() if k != "output"})
    return items


def test_a_history_sent_back_must_be_the_conversation_s_own(
    fake_llm: FakeLLMServer, serve: Callable[..., Served]
) -> None:
    write = {"name": "write_file", "input": {"path": "a.txt", "content": "a"}}
    fake_llm.script(
        {"text": "Writing.", "tool_calls": [write]},
        {"text": "Written."},
        {"text": "Second."},
        {"text": "Elsewhere."},
        {"text": "Third."},
        {"text": "Fourth."},
    )
    server = serve("--token", "alice", "--token", "bob")
    with server.client("alice") as c, server.client("bob") as bob:
        first = _respond(c, input="first").json()
        assert [i["type"] for i in first["output"]] == ["message", "mcp_call", "message"]
        held = _history(first, "first")
        # Its ids name the conversation: the next message goes on with it.
        second = _respond(c, input=[*held, _message("user", "second")])
        assert second.status_code == 200, second.text
        second = second.json()
        assert second["conversation"] == first["conversation"]
        assert second["previous_response_id"] == first["id"]
        held += _history(second, "second")

        wrong = [*held[:-2], _message("user", "not second"), held[-1]]
        _refused(
            _respond(c, input=[*wrong, _message("user", "third")]),
            409,
            "history_mismatch",
            f"input item {len(held) - 1}",
        )
        # Every user message of the conversation is in it, and answers only where they are.
        _refused(
            _respond(c, input=[*held[:4], _message("user", "third")]),
            409,
            "history_mismatch",
            "1 more user message",
        )
        answers_first = [i for i in held if i.get("content") != "second"]
        _refused(
            _respond(c, input=[*answers_first, _message("user", "third")]),
            409,
            "history_mismatch",
            "input item 5 (an answer)",
        )
        # An answer of another conversation (another token's: no conversation of alice's).
        elsewhere = _respond(bob, input="elsewhere").json()
        theirs = _history(elsewhere, "elsewhere")
        _refused(
            _respond(c, input=[*theirs, _message("user", "third")]),
            409,
            "history_mismatch",
            "no conversation",
        )
        _refused(
            _respond(c, input=[*held[:2], *theirs[1:], *held[2:], _message("user", "third")]),
            409,
            "history_mismatch",
            "not of this conversation",
        )
        # Without ids (pydantic-ai's default) a history names nothing: the conversation is
        # named, or it is refused saying how to name it.
        bare = [
            _message("user", "first"),
            _message("assistant", "…"),
            _message("user", "second"),
            _message("assistant", "…"),
        ]
        _refused(
            _respond(c, input=[*bare, _message("user", "third")]),
            409,
            "history_mismatch",
            "previous_response_id",
        )
        third = _respond(
            c, input=[*bare, _message("user", "third")], previous_response_id=second["id"]
        )
        assert third.status_code == 200, third.text
        assert third.json()["conversation"] == first["conversation"]
        # An answer the client never got may be missing (here the first).
        got = [held[0], *held[4:], *_history(third.json(), "third")]
        fourth = _respond(c, input=[*got, _message("user", "fourth")])
        assert fourth.status_code == 200, fourth.text
        assert fourth.json()["previous_response_id"] == third.json()["id"]
        turns = c.get(f"/v1/sessions/{first['conversation']['id']}").json()["turns"]
        assert [t["user_message"]["content"][0]["text"] for t in turns] == [
            "first",
            "second",
            "third",
            "fourth",
        ]


def _running_call(c: httpx2.Client) -> dict[str, Any]:
    """A new background response (as created), once drover's tool call is under way."""
    body = {"model": "any", "input": "go", "background": True, "stream": True}
    with c.stream("POST", "/v1/responses", json=body) as events:
        for line in events.iter_lines():
            event = json.loads(line.removeprefix("data: ")) if line.startswith("data: {") else {}
            if event.get("type") == "response.created":
                created: dict[str, Any] = event["response"]
            if event.get("type") == "response.mcp_call.in_progress":
                return created
    raise AssertionError("the response ended before its call was under way")


def test_a_post_with_no_body_on_a_route_that_takes_none_is_an_empty_object(
    fake_llm: FakeLLMServer, serve: Callable[..., Served], tmp_path: Path
) -> None:
    Gate(tmp_path / "work")  # never opened: each call waits until it is cut off
    fake_llm.script(gated_turn("Waiting.")[0], gated_turn("Waiting again.")[0])
    server = serve()
    with server.client() as c:
        for route, length in (("cancel", "0"), ("interrupt", None)):
            started = _running_call(c)
            path = f"/v1/responses/{started['id']}/cancel"
            if route == "interrupt":
                path = f"/v1/sessions/{started['conversation']['id']}/interrupt"
            # A body without its type, or typed as no page could, is still refused.
            for headers, body in (({}, b"{}"), ({"Content-Type": "text/plain"}, b"")):
                refused = c.post(path, content=body, headers=headers)
                _refused(refused, 415, "unsupported_media_type")
            # A POST with no body at all, as the openai npm SDK's cancel sends it: no
            # Content-Type, and a Content-Length of 0 (or none).
            request = c.build_request("POST", path)
            assert "content-type" not in request.headers
            if length is None:
                del request.headers["Content-Length"]
            else:
                request.headers["Content-Length"] = length
            done = c.send(request)
            assert done.status_code in (200, 202), done.text
            with c.stream("GET", f"/v1/responses/{started['id']}?stream=true") as events:
                last = [line for line in events.iter_lines() if line.startswith("data: {")][-1]
            ended = json.loads(last.removeprefix("data: "))["response"]
            assert (ended["status"], ended["drover_reason"]) == ("cancelled", "interrupted")


@pytest.mark.parametrize("where", ["origin", "sec-fetch-site"])
def test_a_page_of_another_site_cannot_post_with_no_body(
    fake_llm: FakeLLMServer, serve: Callable[..., Served], where: str
) -> None:
    server = serve()
    headers = (
        {"Origin": "http://evil.example"} if where == "origin" else {"Sec-Fetch-Site": "cross-site"}
    )
    with server.client() as c:
        for path in ("/v1/responses/resp_x/cancel", "/v1/sessions/s/interrupt"):
            _refused(c.post(path, headers=headers), 403, "forbidden_origin")
