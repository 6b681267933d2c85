"""Scripted faults as each real SDK experiences them: HTTP errors, cut, dropped, stalled streams."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterable
from typing import Any

import anthropic
import httpx2
import openai
import pytest
from support.sse import asse_lines

from drover.testing import FakeLLMServer

from .conftest import USER, Collect


async def drain(stream: AsyncIterable[Any]) -> None:
    async for _item in stream:
        pass


LONG = "The answer is forty-two, because the question was never quite what anyone thought."


@pytest.mark.parametrize(
    ("status", "anthropic_error", "openai_error"),
    [
        (529, anthropic.OverloadedError, openai.InternalServerError),
        (500, anthropic.InternalServerError, openai.InternalServerError),
        (429, anthropic.RateLimitError, openai.RateLimitError),
        (400, anthropic.BadRequestError, openai.BadRequestError),
    ],
)
async def test_http_error_raises_the_status_class(
    fake_llm: FakeLLMServer,
    collect: Collect,
    protocol: str,
    status: int,
    anthropic_error: type[Exception],
    openai_error: type[Exception],
) -> None:
    fake_llm.script({"http_error": {"status": status, "retry_after": 0}})
    expected = anthropic_error if protocol == "anthropic" else openai_error
    with pytest.raises(expected) as caught:
        await collect()
    error: Any = caught.value
    assert error.status_code == status
    assert error.response.headers["retry-after"] == "0"
    if protocol == "anthropic":
        assert error.body["type"] == "error"
        assert error.request_id.startswith("req_")
        assert error.response.headers["request-id"] == error.body["request_id"]
    else:
        assert set(error.body) == {"message", "type", "param", "code"}


async def test_http_error_keeps_scripted_type_and_message(
    fake_llm: FakeLLMServer, collect: Collect, protocol: str
) -> None:
    fake_llm.script(
        {"http_error": {"status": 529, "type": "overloaded_error", "message": "Overloaded"}}
    )
    with pytest.raises(Exception) as caught:  # noqa: PT011 - the class is checked above
        await collect()
    body: Any = caught.value.body  # type: ignore[attr-defined]
    if protocol == "anthropic":
        assert body["error"] == {"type": "overloaded_error", "message": "Overloaded"}
    else:
        assert body["message"] == "Overloaded"
        assert body["type"] == "server_error"


async def test_error_after_cuts_the_stream_with_the_protocols_error(
    fake_llm: FakeLLMServer, collect: Collect, protocol: str
) -> None:
    fake_llm.script(
        {"text": LONG, "error_after": 6, "error": {"type": "overloaded_error", "message": "Busy"}}
    )
    if protocol == "anthropic":
        with pytest.raises(anthropic.APIStatusError) as caught:
            await collect()
        body: Any = caught.value.body
        assert body["error"] == {"type": "overloaded_error", "message": "Busy"}
        assert body["request_id"].startswith("req_")
    elif protocol == "openai-chat":
        with pytest.raises(openai.APIError) as raised:
            await collect()
        assert raised.value.message == "Busy"
        assert raised.value.body == {
            "message": "Busy",
            "type": "server_error",
            "param": None,
            "code": None,
        }
    else:
        out = await collect()  # the SDK hands the error event over as an ordinary event
        last = out.events[-1]
        assert last.type == "error"
        assert last.code == "server_error"
        assert last.message == "Busy"
        assert last.sequence_number == 6
        assert len(out.events) == 7
        assert 0 < len(out.text) < len(LONG)
        assert LONG.startswith(out.text)
        assert out.stop is None


async def test_responses_failed_event(
    fake_llm: FakeLLMServer, openai_client: openai.AsyncOpenAI
) -> None:
    fake_llm.script({"text": LONG, "error_after": 4, "error": {"type": "failed"}})
    stream = await openai_client.responses.create(model="m", input="hi", stream=True)
    events = [event async for event in stream]
    last = events[-1]
    assert last.type == "response.failed"
    assert last.sequence_number == 4
    assert last.response.status == "failed"
    assert last.response.error is not None
    assert last.response.error.code == "server_error"


async def test_error_after_without_stream_is_an_http_error(
    fake_llm: FakeLLMServer, anthropic_client: anthropic.AsyncAnthropic
) -> None:
    fake_llm.script({"text": LONG, "error_after": 3})
    with pytest.raises(anthropic.OverloadedError):
        await anthropic_client.messages.create(model="m", max_tokens=5, messages=USER)


async def test_drop_after_breaks_the_connection(
    fake_llm: FakeLLMServer, collect: Collect, protocol: str
) -> None:
    fake_llm.script({"text": LONG, "drop_after": 5})
    broken = (anthropic.APIConnectionError, openai.APIConnectionError, httpx2.TransportError)
    with pytest.raises(broken):
        await collect()


async def test_drop_without_stream_breaks_the_connection(
    fake_llm: FakeLLMServer, openai_client: openai.AsyncOpenAI
) -> None:
    fake_llm.script({"text": LONG, "drop_after": 0})
    with pytest.raises(openai.APIConnectionError):
        await openai_client.chat.completions.create(model="m", messages=USER)


async def test_stall_after_ends_with_the_client_timeout(
    fake_llm: FakeLLMServer, protocol: str
) -> None:
    fake_llm.script({"text": LONG, "stall_after": 3}, {"text": "next"})
    timeout = httpx2.Timeout(5.0, read=0.2)
    timed_out = (anthropic.APITimeoutError, openai.APITimeoutError, httpx2.ReadTimeout)
    if protocol == "anthropic":
        async with anthropic.AsyncAnthropic(
            base_url=fake_llm.base_url, api_key="k", max_retries=0, timeout=timeout
        ) as a_client:
            stream = await a_client.messages.create(
                model="m", max_tokens=5, messages=USER, stream=True
            )
            with pytest.raises(timed_out):
                async for _event in stream:
                    pass
            # The stalled reply ended when the client left: the server answers the next one.
            message = await a_client.messages.create(model="m", max_tokens=5, messages=USER)
            assert message.content[0].text == "next"  # type: ignore[union-attr]
        return
    async with openai.AsyncOpenAI(
        base_url=fake_llm.openai_base_url, api_key="k", max_retries=0, timeout=timeout
    ) as o_client:

        async def stalled() -> None:
            if protocol == "openai-chat":
                await drain(
                    await o_client.chat.completions.create(model="m", messages=USER, stream=True)
                )
            else:
                await drain(await o_client.responses.create(model="m", input="hi", stream=True))

        with pytest.raises(timed_out):
            await stalled()


async def test_stop_ends_a_stalled_stream_promptly() -> None:
    server = FakeLLMServer()
    server.start()
    server.script({"text": LONG, "stall_after": 2})
    async with httpx2.AsyncClient(timeout=30) as client:
        body = {"model": "m", "max_tokens": 5, "messages": USER, "stream": True}
        async with client.stream("POST", f"{server.base_url}/v1/messages", json=body) as response:
            lines = asse_lines(response)
            assert (await anext(lines)).startswith("event: message_start")
            await asyncio.wait_for(asyncio.to_thread(server.stop), timeout=5)
            with pytest.raises(httpx2.RemoteProtocolError):
                async for _line in lines:
                    pass


async def test_per_response_delay_still_streams_everything(
    fake_llm: FakeLLMServer, collect: Collect
) -> None:
    fake_llm.script({"text": "slowly now", "delay": 0.001})
    out = await collect()
    assert out.text == "slowly now"


async def test_a_gated_reply_writes_each_frame_when_the_test_lets_it(
    fake_llm: FakeLLMServer,
) -> None:
    fake_llm.script({"text": "one frame at a time", "gate": True})
    async with httpx2.AsyncClient(timeout=30) as client:
        body = {"model": "m", "max_tokens": 5, "messages": USER, "stream": True}
        async with client.stream("POST", f"{fake_llm.base_url}/v1/messages", json=body) as response:
            lines = asse_lines(response)
            texts = []
            while True:
                frame = (await asyncio.to_thread(fake_llm.step)).decode()
                got = []  # what the client reads now is that frame, and only it
                while not got or got[-1] != "":
                    got.append(await anext(lines))
                assert "\n".join(got) + "\n" == frame
                data = json.loads(frame.split("data: ", 1)[1])
                texts.append(data.get("delta", {}).get("text", ""))
                if data["type"] == "message_stop":
                    break
    assert "".join(texts) == "one frame at a time"
    with pytest.raises(TimeoutError):  # nothing is gated any more
        await asyncio.to_thread(fake_llm.step, 0.05)


async def test_stop_ends_a_gated_reply_promptly() -> None:
    server = FakeLLMServer()
    server.start()
    server.script({"text": LONG, "gate": True})
    async with httpx2.AsyncClient(timeout=30) as client:
        body = {"model": "m", "max_tokens": 5, "messages": USER, "stream": True}
        async with client.stream("POST", f"{server.base_url}/v1/messages", json=body) as response:
            lines = asse_lines(response)
            assert (await asyncio.to_thread(server.step)).startswith(b"event: message_start")
            assert (await anext(lines)).startswith("event: message_start")
            await asyncio.wait_for(asyncio.to_thread(server.stop), timeout=5)
            with pytest.raises(httpx2.RemoteProtocolError):
                async for _line in lines:
                    pass
