"""Responses API ``previous_response_id``: chaining stored responses, and the real refusal."""

from __future__ import annotations

import openai
import pytest

from drover.testing import FakeLLMServer, Scenario

CALL = {"tool_calls": [{"name": "glob", "input": {"pattern": "*"}, "id": "call_1"}]}
NOT_FOUND = {
    "message": "Previous response with id 'resp_nope' not found.",
    "type": "invalid_request_error",
    "param": "previous_response_id",
    "code": "previous_response_not_found",
}


def output(call_id: str = "call_1") -> list[dict[str, str]]:
    return [{"type": "function_call_output", "call_id": call_id, "output": "a.txt"}]


async def test_chained_request_only_sends_the_new_items(
    fake_llm: FakeLLMServer, openai_client: openai.AsyncOpenAI
) -> None:
    fake_llm.script(CALL, {"text": "one file"})
    first = await openai_client.responses.create(model="m", input="list files")
    second = await openai_client.responses.create(
        model="m",
        input=output(),
        previous_response_id=first.id,  # type: ignore[arg-type]
    )
    assert second.output_text == "one file"
    assert second.previous_response_id == first.id
    assert fake_llm.violations == []


async def test_chain_is_validated_as_a_whole(
    fake_llm: FakeLLMServer, openai_client: openai.AsyncOpenAI
) -> None:
    fake_llm.allow_violations = True
    fake_llm.script(CALL, {"text": "never"})
    stream = await openai_client.responses.create(model="m", input="list files", stream=True)
    completed = [e async for e in stream if e.type == "response.completed"]
    with pytest.raises(openai.BadRequestError):
        await openai_client.responses.create(
            model="m", input="and?", previous_response_id=completed[0].response.id
        )
    assert fake_llm.violations == [
        "openai-responses request #2: No tool output found for function call call_1."
    ]


async def test_unknown_previous_response_is_refused_like_the_real_api(
    fake_llm: FakeLLMServer, openai_client: openai.AsyncOpenAI
) -> None:
    fake_llm.script({"text": "unused"})
    with pytest.raises(openai.BadRequestError) as caught:
        await openai_client.responses.create(model="m", input="x", previous_response_id="resp_nope")
    assert caught.value.status_code == 400
    assert caught.value.body == NOT_FOUND
    assert caught.value.code == "previous_response_not_found"
    assert fake_llm.remaining == 1
    assert fake_llm.violations == []


async def test_store_responses_false_refuses_every_chain(
    fake_llm: FakeLLMServer, openai_client: openai.AsyncOpenAI
) -> None:
    options = {"store_responses": False}
    fake_llm.script(Scenario.from_data({"options": options, "responses": [CALL, {"text": "x"}]}))
    first = await openai_client.responses.create(model="m", input="list files")
    with pytest.raises(openai.BadRequestError) as caught:
        await openai_client.responses.create(
            model="m",
            input=output(),
            previous_response_id=first.id,  # type: ignore[arg-type]
        )
    assert caught.value.code == "previous_response_not_found"


async def test_request_with_store_false_is_not_kept(
    fake_llm: FakeLLMServer, openai_client: openai.AsyncOpenAI
) -> None:
    fake_llm.script({"text": "a"})
    first = await openai_client.responses.create(model="m", input="x", store=False)
    with pytest.raises(openai.BadRequestError):
        await openai_client.responses.create(model="m", input="y", previous_response_id=first.id)


async def test_a_cut_stream_is_not_stored(
    fake_llm: FakeLLMServer, openai_client: openai.AsyncOpenAI
) -> None:
    fake_llm.script({"text": "long enough text", "error_after": 3})
    stream = await openai_client.responses.create(model="m", input="x", stream=True)
    events = [event async for event in stream]
    response_id = events[0].response.id
    with pytest.raises(openai.BadRequestError):
        await openai_client.responses.create(model="m", input="y", previous_response_id=response_id)
