"""A gateway's report of an upstream failure part-way through an answer, as the gateway words it.

A gateway (LiteLLM, here) in front of the model says "the upstream failed" in its own shapes,
never the model API's: a Chat Completions error chunk with only an HTTP status for code
(``{"type": null, "code": "500"}``) or LiteLLM's ``internal_server_error``, a Responses
``response.failed`` with ``server_error``, an Anthropic ``api_error`` event. Each is a transient
failure — an overload, a dropped connection upstream — that a new attempt gets past, so each
must be a *retryable* stream error, and the loop must then finish the turn. The recordings are
the LiteLLM proxy's real bytes (``tests/fixtures/wire/README.md``), replayed through the real SDKs
by the fake server.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from drover.core.events import Done, Retry
from drover.core.model_stream import BlockDelta
from drover.core.sinks import EventRecorder
from drover.errors import StreamError
from drover.testing.server import FakeLLMServer
from drover.tools.registry import default_registry
from drover.turn.loop import LoopSettings
from drover.turn.permissions import PermissionPolicy
from drover.turn.state import AgentSession

from .conftest import drain, make_provider, request

WIRE = Path(__file__).parent.parent / "fixtures" / "wire"
#: No wait between the loop's retries of a stream that failed part-way.
FAST = LoopSettings(stream_retry_delay=0.0)

#: (recording, protocol that reads it, the text it streamed before failing)
RECORDED = [
    ("openai_chat/litellm-midstream-overload.sse", "openai", "Hello there, a longer an"),
    ("openai_chat/litellm-anthropic-midstream-overload.sse", "openai", "Hello there, a longer an"),
    (
        "openai_responses/litellm-anthropic-failed.sse",
        "openai-responses",
        "Hello there, a longer an",
    ),
    ("anthropic/litellm-openai-midstream-error.sse", "anthropic", "Hello there, a l"),
]


@pytest.mark.parametrize(("path", "protocol", "streamed"), RECORDED, ids=[r[0] for r in RECORDED])
async def test_a_gateways_midstream_failure_is_a_retryable_stream_error(
    fake_llm: FakeLLMServer, path: str, protocol: str, streamed: str
) -> None:
    fake_llm.script({"raw": str(WIRE / path)})
    provider = make_provider(protocol, fake_llm)
    try:
        outcome = await drain(provider, request())
    finally:
        await provider.aclose()
    error = outcome.error
    assert isinstance(error, StreamError), error
    assert error.retryable, f"{error} ({error.error_type}) is final"
    assert outcome.acc.has_content and outcome.retries == []  # the stream had started
    texts = [e.data for e in outcome.events if isinstance(e, BlockDelta) and e.kind == "text"]
    assert "".join(texts) == streamed


@pytest.mark.parametrize(("path", "protocol", "streamed"), RECORDED, ids=[r[0] for r in RECORDED])
async def test_the_loop_retries_a_gateways_midstream_failure_to_completion(
    fake_llm: FakeLLMServer, tmp_path: Path, path: str, protocol: str, streamed: str
) -> None:
    fake_llm.script({"raw": str(WIRE / path)}, {"text": "The whole answer."})
    provider = make_provider(protocol, fake_llm, store=False)
    session = AgentSession(
        provider=provider,
        tools=default_registry(),
        workdir=tmp_path,
        policy=PermissionPolicy("allow"),
        settings=FAST,
    )
    try:
        outcome = await session.run("hello", sink := EventRecorder())
    finally:
        await provider.aclose()
    assert isinstance(outcome.event, Done), outcome.event
    assert outcome.event.text == "The whole answer."
    retries = [e for e in sink.events if isinstance(e, Retry)]
    assert len(retries) == 1 and retries[0].discard_partial  # the partial text was shown
    assert fake_llm.remaining == 0


def _failed(event: str, code: object) -> str:
    """A Responses stream that opens, streams a word and ends in ``event``: a
    ``response.failed`` or an ``error`` event with ``code``."""
    created = {"type": "response.created", "response": {"id": "resp_1", "status": "in_progress"}}
    item = {"id": "msg_1", "type": "message", "role": "assistant", "content": []}
    failure: dict[str, object] = {"type": "error", "code": code, "message": "x", "param": None}
    if event == "response.failed":
        error = {"code": code, "message": "x"}
        failure = {"type": event, "response": {"id": "resp_1", "status": "failed", "error": error}}
    events = [
        created,
        {"type": "response.output_item.added", "output_index": 0, "item": item},
        {"type": "response.output_text.delta", "output_index": 0, "delta": "Hi"},
        failure,
    ]
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)


@pytest.mark.parametrize("event", ["response.failed", "error"])
@pytest.mark.parametrize(
    ("code", "retryable"),
    [(502, True), ("503", True), (429, True), (400, False), ("invalid_prompt", False)],
)
async def test_a_responses_failure_with_a_status_code_is_retryable_as_that_status(
    fake_llm: FakeLLMServer, event: str, code: object, retryable: bool
) -> None:
    """A ``response.failed`` or ``error`` event whose code is an HTTP status (a number, as some
    gateways send it, or its digits) is as retryable as that status would be before the stream
    started."""
    fake_llm.script({"raw_text": _failed(event, code)})
    provider = make_provider("openai-responses", fake_llm)
    try:
        outcome = await drain(provider, request())
    finally:
        await provider.aclose()
    error = outcome.error
    assert isinstance(error, StreamError) and error.retryable is retryable
    assert error.error_type == str(code)
