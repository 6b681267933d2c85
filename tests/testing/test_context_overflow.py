"""``context_overflow`` and ``hang``: the fake server refuses an over-long prompt with each
API's own body, and can say nothing at all, not even a status line."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest

from drover.testing import FakeLLMServer, ScriptedResponse

BODIES: dict[str, dict[str, Any]] = {
    "/v1/messages": {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}]},
    "/v1/chat/completions": {"model": "m", "messages": [{"role": "user", "content": "x"}]},
    "/v1/responses": {"model": "m", "input": "x"},
}


async def post(server: FakeLLMServer, path: str, **extra: Any) -> httpx2.Response:
    async with httpx2.AsyncClient(base_url=server.base_url, timeout=10) as client:
        return await client.post(path, json={**BODIES[path], **extra})


async def test_anthropic_says_the_prompt_is_too_long(fake_llm: FakeLLMServer) -> None:
    fake_llm.script({"context_overflow": {"tokens": 208310, "limit": 200000}})
    reply = await post(fake_llm, "/v1/messages", stream=True)
    assert reply.status_code == 400
    body = reply.json()
    assert body["type"] == "error" and body["request_id"].startswith("req_")
    assert body["error"] == {
        "type": "invalid_request_error",
        "message": "prompt is too long: 208310 tokens > 200000 maximum",
    }


async def test_chat_completions_says_context_length_exceeded(fake_llm: FakeLLMServer) -> None:
    fake_llm.script({"context_overflow": {"tokens": 4294, "limit": 4097}})
    reply = await post(fake_llm, "/v1/chat/completions", stream=True)
    assert reply.status_code == 400
    assert reply.json() == {
        "error": {
            "message": "This model's maximum context length is 4097 tokens. However, your "
            "messages resulted in 4294 tokens. Please reduce the length of the messages.",
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    }


async def test_responses_says_the_input_exceeds_the_window(fake_llm: FakeLLMServer) -> None:
    fake_llm.script({"context_overflow": True})
    reply = await post(fake_llm, "/v1/responses", stream=True)
    assert reply.status_code == 400
    assert reply.json()["error"] == {
        "message": "Your input exceeds the context window of this model. Please adjust your "
        "input and try again.",
        "type": "invalid_request_error",
        "param": "input",
        "code": "context_length_exceeded",
    }


def _events(text: str) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for frame in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in frame.splitlines())
        events.append((lines["event"], json.loads(lines["data"])))
    return events


@pytest.mark.parametrize("kind", ["failed", "error"])
async def test_responses_can_fail_for_length_inside_the_stream(
    fake_llm: FakeLLMServer, kind: str
) -> None:
    fake_llm.script({"context_overflow": {"mid_stream": kind}})
    reply = await post(fake_llm, "/v1/responses", stream=True)
    assert reply.status_code == 200
    events = _events(reply.text)
    assert [name for name, _data in events[:2]] == ["response.created", "response.in_progress"]
    assert [data["sequence_number"] for _name, data in events] == [0, 1, 2]
    name, last = events[-1]
    message = "Your input exceeds the context window of this model."
    if kind == "failed":
        assert name == "response.failed" and last["response"]["status"] == "failed"
        assert last["response"]["error"]["code"] == "context_length_exceeded"
        assert last["response"]["error"]["message"].startswith(message)
    else:
        assert name == "error" and last["type"] == "error"
        assert last["code"] == "context_length_exceeded" and last["param"] == "input"
        assert last["message"].startswith(message)


async def test_mid_stream_only_changes_the_responses_api(fake_llm: FakeLLMServer) -> None:
    fake_llm.script({"context_overflow": {"mid_stream": "failed"}})
    reply = await post(fake_llm, "/v1/chat/completions", stream=True)
    assert reply.status_code == 400
    assert reply.json()["error"]["code"] == "context_length_exceeded"


async def test_hang_sends_no_status_line(fake_llm: FakeLLMServer) -> None:
    fake_llm.script({"hang": True})
    async with httpx2.AsyncClient(base_url=fake_llm.base_url, timeout=0.3) as client:
        with pytest.raises(httpx2.ReadTimeout):
            await client.post("/v1/messages", json=BODIES["/v1/messages"])
    assert len(fake_llm.requests) == 1


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ({"context_overflow": {"limit": 10, "tokens": 10}}, "tokens: must exceed the limit"),
        ({"context_overflow": {"mid_stream": "later"}}, "mid_stream: expected failed or error"),
        ({"context_overflow": {"size": 3}}, "unknown key 'size'"),
        ({"context_overflow": True, "http_error": {"status": 500}}, "cannot be combined"),
        ({"context_overflow": True, "stall_after": 1}, "cannot be combined"),
        ({"hang": True, "drop_after": 1}, "'hang' cannot be combined with 'drop_after'"),
        ({"hang": "yes"}, "hang: expected true or false"),
    ],
)
def test_bad_overflow_and_hang_scripts_say_what_is_wrong(
    data: dict[str, Any], problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        ScriptedResponse.from_data(data)
