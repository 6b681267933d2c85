"""``raw`` / ``raw_text`` responses: recorded bytes sent verbatim, frame by frame, with faults."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import openai
import pytest

from drover.testing import FakeLLMServer, ScriptedResponse, load_scenario
from drover.testing.wire import split_frames

from .conftest import USER
from .test_raw_bytes import post, read_until_broken

FIXTURES = Path(__file__).parent.parent / "fixtures" / "wire"
TEXT_SSE = FIXTURES / "anthropic" / "text.sse"
CHAT_SSE = FIXTURES / "openai_chat" / "text-include-usage.sse"
THREE = b'data: {"n":1}\n\ndata: {"n":2}\n\ndata: {"n":3}\n\ndata: [DONE]\n\n'


# --- frames --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"", ()),
        (b"data: 1\n\ndata: 2\n\n", (b"data: 1\n\n", b"data: 2\n\n")),
        (
            b"event: a\r\ndata: 1\r\n\r\ndata: 2\r\n\r\n",
            (b"event: a\r\ndata: 1\r\n\r\n", b"data: 2\r\n\r\n"),
        ),
        (b"data: 1\r\rdata: 2\r\r", (b"data: 1\r\r", b"data: 2\r\r")),
        (b": comment\n\ndata: 1", (b": comment\n\n", b"data: 1")),
        (b'{"a": 1}\n', (b'{"a": 1}\n',)),
        (b"data: 1\n\n\ndata: 2\n\n", (b"data: 1\n\n", b"\ndata: 2\n\n")),
    ],
)
def test_split_frames_cuts_after_each_blank_line(body: bytes, expected: tuple[bytes, ...]) -> None:
    assert split_frames(body) == expected
    assert b"".join(split_frames(body)) == body


def test_split_frames_does_not_mistake_a_crlf_for_a_blank_line() -> None:
    assert split_frames(b"event: x\r\ndata: 1\r\n") == (b"event: x\r\ndata: 1\r\n",)


@pytest.mark.parametrize("path", sorted(FIXTURES.rglob("*.sse")), ids=lambda p: p.name)
def test_every_recording_splits_without_loss(path: Path) -> None:
    body = path.read_bytes()
    assert b"".join(split_frames(body)) == body


# --- parsing -------------------------------------------------------------------------------------


def test_raw_path_is_read_relative_to_the_scenario_file(tmp_path: Path) -> None:
    (tmp_path / "rec").mkdir()
    (tmp_path / "rec" / "a.sse").write_bytes(THREE)
    (tmp_path / "b.json").write_bytes(b'{"ok": true}')
    scenario_file = tmp_path / "scenario.yaml"
    scenario_file.write_text(
        "responses:\n"
        "  - raw: rec/a.sse\n"
        f"  - {{raw: {tmp_path / 'b.json'}, status: 201}}\n"
        '  - {raw_text: "data: [DONE]\\n\\n", content_type: text/plain}\n'
    )
    first, second, third = load_scenario(scenario_file).responses
    assert first.raw is not None
    assert first.raw.body == THREE
    assert first.raw.content_type == "text/event-stream; charset=utf-8"
    assert first.raw.status == 200
    assert first.raw.source == str(tmp_path / "rec" / "a.sse")
    assert second.raw is not None
    assert (second.raw.body, second.raw.content_type, second.raw.status) == (
        b'{"ok": true}',
        "application/json",
        201,
    )
    assert third.raw is not None
    assert (third.raw.body, third.raw.content_type) == (b"data: [DONE]\n\n", "text/plain")
    assert third.raw.source == "raw_text"


def test_raw_path_in_python_data_uses_base_dir(tmp_path: Path) -> None:
    (tmp_path / "a.sse").write_bytes(THREE)
    response = ScriptedResponse.from_data({"raw": "a.sse"}, base_dir=tmp_path)
    assert response.raw is not None
    assert response.raw.body == THREE


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"raw": "missing.sse"}, "responses[0].raw: cannot read"),
        ({"raw": "a.sse", "raw_text": "x"}, "give either 'raw' or 'raw_text'"),
        ({"raw_text": "x", "text": "hi"}, "'raw_text' cannot be combined with 'text'"),
        ({"raw": "a.sse", "tool_calls": []}, "'raw' cannot be combined with 'tool_calls'"),
        ({"raw_text": "x", "http_error": {"status": 500}}, "cannot be combined with 'http_error'"),
        ({"raw_text": "x", "usage": {}}, "cannot be combined with 'usage'"),
        ({"content_type": "text/plain", "text": "hi"}, "'content_type' only applies together"),
        ({"status": 500, "text": "hi"}, "'status' only applies together with 'raw'"),
        ({"raw_text": "x", "status": 99}, "responses[0].status: must be at least 100"),
        ({"raw_text": "x", "status": 600}, "must be an HTTP status (100-599)"),
        ({"raw_text": 3}, "responses[0].raw_text: expected a string"),
        ({"raw_text": "x", "error": {"type": "api_error"}}, "only applies together with"),
        ({"raw_text": "x", "error_after": 1, "drop_after": 2}, "choose one of"),
    ],
)
def test_raw_parsing_errors_name_the_place(
    tmp_path: Path, data: dict[str, Any], message: str
) -> None:
    (tmp_path / "a.sse").write_bytes(THREE)
    with pytest.raises(ValueError, match="responses\\[0\\]") as caught:
        ScriptedResponse.from_data(data, "responses[0]", base_dir=tmp_path)
    assert message in str(caught.value)


def test_raw_combines_with_faults_and_delay() -> None:
    response = ScriptedResponse.from_data(
        {"raw_text": "x", "error_after": 1, "error": {"type": "api_error"}, "delay": 0.5}
    )
    assert response.raw is not None
    assert (response.error_after, response.delay) == (1, 0.5)


# --- serving -------------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["anthropic", "openai-chat", "openai-responses"])
async def test_raw_bytes_are_sent_verbatim_on_every_path(
    fake_llm: FakeLLMServer, protocol: str
) -> None:
    body = TEXT_SSE.read_bytes()
    fake_llm.script({"raw": str(TEXT_SSE), "content_type": "text/event-stream"})
    response = await post(fake_llm, protocol)
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream"
    assert response.content == body


async def test_raw_is_sent_even_when_no_stream_was_asked(fake_llm: FakeLLMServer) -> None:
    fake_llm.script({"raw_text": '{"not": "sse"}', "content_type": "application/json"})
    response = await post(fake_llm, "openai-chat", stream=False)
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {"not": "sse"}


async def test_raw_status_reaches_the_sdk(fake_llm: FakeLLMServer) -> None:
    fake_llm.script(
        {
            "raw_text": '{"error":{"message":"model is loading","type":"server_error"}}',
            "content_type": "application/json",
            "status": 503,
        }
    )
    client = openai.AsyncOpenAI(base_url=fake_llm.openai_base_url, api_key="t", max_retries=0)
    with pytest.raises(openai.InternalServerError) as caught:
        await client.chat.completions.create(model="m", messages=USER, stream=True)
    await client.close()
    assert caught.value.status_code == 503
    assert caught.value.message.endswith("model is loading")


async def test_raw_requests_are_still_validated(fake_llm: FakeLLMServer) -> None:
    fake_llm.allow_violations = True
    fake_llm.script({"raw_text": THREE.decode()})
    bad = [{"role": "assistant", "content": "hi"}]
    response = await post(fake_llm, "anthropic", messages=bad)
    assert response.status_code == 400
    assert fake_llm.violations
    assert fake_llm.remaining == 1
    # The raw reply is still queued for the next, valid, request.
    assert (await post(fake_llm, "anthropic")).content == THREE


async def test_raw_error_after_appends_the_protocols_error_event(fake_llm: FakeLLMServer) -> None:
    frames = split_frames(TEXT_SSE.read_bytes())
    fake_llm.script(
        {
            "raw": str(TEXT_SSE),
            "error_after": 3,
            "error": {"type": "overloaded_error", "message": "Busy"},
        }
    )
    response = await post(fake_llm, "anthropic")
    sent = split_frames(response.content)
    assert sent[:3] == frames[:3]
    assert sent[3].startswith(b"event: error\ndata: ")
    assert b'"error":{"type":"overloaded_error","message":"Busy"}' in sent[3]
    assert len(sent) == 4


async def test_raw_error_after_is_what_the_sdk_raises(fake_llm: FakeLLMServer) -> None:
    fake_llm.script({"raw": str(TEXT_SSE), "error_after": 4, "error": {"type": "overloaded_error"}})
    client = anthropic.AsyncAnthropic(
        base_url=fake_llm.anthropic_base_url, api_key="t", max_retries=0
    )
    seen: list[str] = []

    async def read() -> None:
        stream = await client.messages.create(
            model="claude-test", max_tokens=10, messages=USER, stream=True
        )
        async for event in stream:
            seen.append(event.type)

    with pytest.raises(anthropic.APIStatusError) as caught:
        await read()
    await client.close()
    assert seen == ["message_start", "content_block_start", "content_block_delta"]  # ping skipped
    body: Any = caught.value.body
    assert body["error"]["type"] == "overloaded_error"


@pytest.mark.parametrize(
    ("protocol", "start"),
    [
        ("openai-chat", b'data: {"error":{"message":'),
        ("openai-responses", b'event: error\ndata: {"type":"error","code":"server_error"'),
    ],
)
async def test_raw_error_after_speaks_each_protocol(
    fake_llm: FakeLLMServer, protocol: str, start: bytes
) -> None:
    fake_llm.script({"raw_text": THREE.decode(), "error_after": 2, "error": {"type": "api_error"}})
    sent = split_frames((await post(fake_llm, protocol)).content)
    assert sent[:2] == split_frames(THREE)[:2]
    assert sent[2].startswith(start)
    assert len(sent) == 3


async def test_raw_drop_after_cuts_the_connection_between_frames(fake_llm: FakeLLMServer) -> None:
    fake_llm.script({"raw_text": THREE.decode(), "drop_after": 2})
    path, body = "/v1/chat/completions", {"model": "m", "messages": USER, "stream": True}
    async with (
        httpx2.AsyncClient() as client,
        client.stream("POST", fake_llm.base_url + path, json=body) as response,
    ):
        received = await read_until_broken(response)
    assert received == b"".join(split_frames(THREE)[:2])


async def test_raw_stall_after_goes_quiet_until_the_client_leaves(fake_llm: FakeLLMServer) -> None:
    fake_llm.script({"raw_text": THREE.decode(), "stall_after": 1})
    path, body = "/v1/chat/completions", {"model": "m", "messages": USER, "stream": True}
    received: list[bytes] = []

    async def read(response: httpx2.Response) -> None:
        async for piece in response.aiter_raw():
            received.append(piece)

    async with (
        httpx2.AsyncClient(timeout=httpx2.Timeout(5.0, read=0.3)) as client,
        client.stream("POST", fake_llm.base_url + path, json=body) as response,
    ):
        with pytest.raises(httpx2.ReadTimeout):
            await read(response)
    assert b"".join(received) == split_frames(THREE)[0]


async def test_raw_delay_paces_each_frame(fake_llm: FakeLLMServer) -> None:
    fake_llm.script({"raw_text": THREE.decode(), "delay": 0.05})
    arrivals: list[float] = []
    path, body = "/v1/chat/completions", {"model": "m", "messages": USER, "stream": True}
    async with (
        httpx2.AsyncClient() as client,
        client.stream("POST", fake_llm.base_url + path, json=body) as response,
    ):
        start = time.monotonic()
        async for _piece in response.aiter_raw():
            arrivals.append(time.monotonic() - start)
    assert len(arrivals) >= 2
    assert arrivals[-1] >= 0.1  # four frames, 50 ms before each
    await asyncio.sleep(0)


async def test_raw_replies_are_not_stored_for_previous_response_id(
    fake_llm: FakeLLMServer,
) -> None:
    path = FIXTURES / "openai_responses" / "text.sse"
    fake_llm.script({"raw": str(path)})
    client = openai.AsyncOpenAI(base_url=fake_llm.openai_base_url, api_key="t", max_retries=0)
    stream = await client.responses.create(model="gpt-test", input="hi", stream=True)
    response_id = ""
    async for event in stream:
        if event.type == "response.completed":
            response_id = event.response.id
    assert response_id.startswith("resp_")
    with pytest.raises(openai.BadRequestError, match="not found"):
        await client.responses.create(
            model="gpt-test", input="again", previous_response_id=response_id, stream=True
        )
    await client.close()
