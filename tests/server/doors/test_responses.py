"""The OpenAI Responses door driven by the official ``openai`` SDK (the version drover pins)
against a real ``drover serve``: a background response whose stream is lost resumes with
``starting_after`` to the full output; across a SIGKILL and a restart it ends as the journal
holds it; a cancel ends it ``cancelled``; an ``incomplete`` turn ends ``response.incomplete``
with the API's reason and drover's; drover's tool calls are ``mcp_call`` items."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest

from drover.testing.server import FakeLLMServer

from ..support import Served
from .support import GATE_OUTPUT, GATED, Gate, gated_turn, long_text

WRITE = {"name": "write_file", "input": {"path": "out.txt", "content": "hello"}}


def _dump(events: Iterable[Any]) -> list[dict[str, Any]]:
    return [e.model_dump(mode="json") for e in events]


def _read_until_call_then_open(events: Iterable[Any], gate: Gate, name: str) -> list[Any]:
    """Every event of a stream; the gate opened once drover's ``name`` call is under way."""
    got: list[Any] = []
    for event in events:
        got.append(event)
        if event.type == "response.mcp_call.in_progress" and _call_name(got, event) == name:
            gate.open()
    return got


def _call_name(events: list[Any], event: Any) -> str:
    """The name of the call ``event`` is about (its item, as it was added)."""
    return next(
        e.item.name
        for e in events
        if e.type == "response.output_item.added" and e.item.id == event.item_id
    )


def _assistant_texts(server: Served, session_id: str) -> list[str]:
    with server.client() as client:
        snapshot = client.get(f"/v1/sessions/{session_id}").json()
    return [
        block["text"]
        for turn in snapshot["turns"]
        for m in turn["messages"]
        if m["message"]["role"] == "assistant"
        for block in m["message"]["content"]
        if block["type"] == "text"
    ]


def test_a_lost_stream_resumes_with_starting_after_to_the_full_output(
    fake_llm: FakeLLMServer,
    serve: Callable[..., Served],
    sdk: Callable[[Served], openai.OpenAI],
    tmp_path: Path,
) -> None:
    gate = Gate(tmp_path / "work")
    fake_llm.script(*gated_turn(long_text(200)))
    server = serve()
    client = sdk(server)
    seen = []
    with client.responses.create(model="any", input="go", background=True, stream=True) as lost:
        for event in lost:
            seen.append(event)
            if sum(e.type == "response.output_text.delta" for e in seen) == 20:
                break  # the stream is lost
    assert [e.type for e in seen[:2]] == ["response.created", "response.in_progress"]
    response_id = seen[0].response.id
    session_id = seen[0].response.conversation.id
    with client.responses.retrieve(
        response_id, stream=True, starting_after=seen[-1].sequence_number
    ) as resumed:
        rest = _read_until_call_then_open(resumed, gate, "bash")
    assert rest[0].sequence_number > seen[-1].sequence_number
    received = seen + rest
    numbers = [e.sequence_number for e in received]
    assert numbers == sorted(set(numbers)), "sequence numbers increase without repeats"

    # Nothing missed: what the two connections got is what one client reading the whole
    # response (from the journal now) gets, event for event.
    with client.responses.retrieve(response_id, stream=True) as whole:
        reference = list(whole)
    assert _dump(received) == _dump(reference)

    final = received[-1]
    assert final.type == "response.completed" and final.response.status == "completed"
    output = final.response.output
    assert [item.type for item in output] == ["message", "mcp_call", "message"]
    call = output[1]
    assert (call.name, call.server_label, call.status) == ("bash", "drover", "completed")
    assert json.loads(call.arguments) == GATED["input"]
    assert GATE_OUTPUT in call.output and call.error is None
    assert final.response.output_text == long_text(200) + "Released."
    assert [long_text(200), "Released."] == _assistant_texts(server, session_id)
    # The deltas the client assembled, across the lost stream, are the text.
    streamed = "".join(e.delta for e in received if e.type == "response.output_text.delta")
    assert streamed == final.response.output_text
    assert final.response.usage is not None and final.response.usage.output_tokens > 0

    # A poll is the same object; the SDK's stream helper resumes to the same final response.
    polled = client.responses.retrieve(response_id)
    assert polled.model_dump(mode="json") == final.response.model_dump(mode="json")
    after = seen[-1].sequence_number
    with client.responses.stream(response_id=response_id, starting_after=after) as helper:
        helped = list(helper)
        assert helper.get_final_response().output_text == final.response.output_text
    assert helped and all(e.sequence_number > after for e in helped)


def test_across_a_restart_mid_turn_the_response_goes_on_and_ends_as_the_journal_holds_it(
    fake_llm: FakeLLMServer,
    serve: Callable[..., Served],
    sdk: Callable[[Served], openai.OpenAI],
    tmp_path: Path,
) -> None:
    gate = Gate(tmp_path / "work")
    # Each 8-character delta ends in a key-like run, which a flush holds back. The model's
    # stream stalls after its 200th delta (the fake's Anthropic stream opens with
    # message_start, content_block_start and a ping: 3 frames), past the journal's 1,024-byte
    # flush, and the client is killed once it has seen that delta: some text is kept, and the
    # last delta the client saw is never whole in the journal, however far the server got
    # ahead of a slow client.
    deltas = 200
    fake_llm.script(
        {"text": "".join(f"{i:04d} abc" for i in range(600)), "stall_after": deltas + 3},
        {"text": "Picking up.", "tool_calls": [GATED]},
        {"text": "All done."},
    )
    last = f"{deltas - 1:04d} abc"
    first = serve()
    seen = []
    client = sdk(first)
    stream = client.responses.create(model="any", input="go", background=True, stream=True)
    with pytest.raises((openai.APIError, httpx2.HTTPError)), stream:  # noqa: PT012
        for event in stream:
            seen.append(event)
            text = "".join(e.delta for e in seen if e.type == "response.output_text.delta")
            if text.endswith(last):
                first.stop(signal.SIGKILL)
    response_id = seen[0].response.id
    session_id = seen[0].response.conversation.id

    second = serve()  # ends the dead process's turn and resumes it before it listens
    client = sdk(second)
    polled = client.responses.retrieve(response_id)
    assert polled.status == "in_progress"
    assert polled.output[0].type == "message" and polled.output[0].status == "incomplete"

    # The last number the client holds was lost with the process: the stream starts over.
    with client.responses.retrieve(
        response_id, stream=True, starting_after=seen[-1].sequence_number
    ) as resumed:
        again = _read_until_call_then_open(resumed, gate, "bash")
    assert again[0].type == "response.created"
    # A number the journal holds is continued from.
    holds = seen[1].sequence_number
    with client.responses.retrieve(response_id, stream=True, starting_after=holds) as rest:
        continued = list(rest)
    assert continued[0].sequence_number > holds
    assert _dump(continued) == _dump(again[2:])

    final = again[-1].response
    assert again[-1].type == "response.completed" and final.status == "completed"
    assert final.id == response_id
    assert [(item.type, getattr(item, "status", None)) for item in final.output] == [
        ("message", "incomplete"),
        ("message", "completed"),
        ("mcp_call", "completed"),
        ("message", "completed"),
    ]
    kept = _assistant_texts(second, session_id)
    assert kept[1:] == ["Picking up.", "All done."]
    assert [c.text for item in final.output if item.type == "message" for c in item.content] == (
        kept
    )
    # The client had seen all the kept text of the cut-off call, and maybe more (lost).
    streamed = "".join(e.delta for e in seen if e.type == "response.output_text.delta")
    assert kept[0] and streamed.startswith(kept[0])
    assert client.responses.retrieve(response_id).model_dump(mode="json") == final.model_dump(
        mode="json"
    )


def test_a_cancel_ends_the_response_cancelled(
    fake_llm: FakeLLMServer,
    serve: Callable[..., Served],
    sdk: Callable[[Served], openai.OpenAI],
    tmp_path: Path,
) -> None:
    Gate(tmp_path / "work")  # never opened: the call waits until the cancel cuts it off
    fake_llm.script(gated_turn("Working on it.")[0])
    server = serve()
    client = sdk(server)
    seen: list[Any] = []
    cancelled = None
    with client.responses.create(model="any", input="go", background=True, stream=True) as stream:
        for event in stream:
            seen.append(event)
            if event.type == "response.mcp_call.in_progress":
                cancelled = client.responses.cancel(seen[0].response.id)
    assert cancelled is not None and cancelled.status == "cancelled"
    last = seen[-1]
    assert last.type == "response.incomplete" and last.response.status == "cancelled"
    # drover's reason beside the API's fields: none of the API's reasons says "cancelled".
    assert last.response.incomplete_details is None
    assert last.response.drover_reason == "interrupted"
    assert last.response.model_dump(mode="json") == cancelled.model_dump(mode="json")
    message, call = last.response.output
    assert (message.type, call.type, call.status) == ("message", "mcp_call", "incomplete")
    assert call.output is None and call.error.type == "mcp_tool_execution_error"
    assert "nterrupted" in call.error.content[0]["text"]
    assert [e.type for e in seen if getattr(e, "item_id", None) == call.id][-1] == (
        "response.mcp_call.failed"
    )
    response_id = last.response.id
    assert client.responses.retrieve(response_id).status == "cancelled"
    assert client.responses.cancel(response_id).status == "cancelled"  # (again: as it is)


def test_an_incomplete_turn_ends_incomplete_with_its_reason_and_the_conversation_goes_on(
    fake_llm: FakeLLMServer,
    serve: Callable[..., Served],
    sdk: Callable[[Served], openai.OpenAI],
) -> None:
    fake_llm.script({"text": "Step one.", "tool_calls": [WRITE]}, {"text": "Finished."})
    server = serve("--max-turns", "1")
    client = sdk(server)
    with client.responses.create(model="any", input="go", background=True, stream=True) as stream:
        events = list(stream)
    last = events[-1]
    assert last.type == "response.incomplete" and last.response.status == "incomplete"
    # The API's reason where it has one for drover's (a limit on the output), and drover's.
    assert last.response.incomplete_details.reason == "max_output_tokens"
    assert last.response.drover_reason == "max_turns"
    first_id = last.response.id
    # The next response goes on in the same conversation, from where the first stopped.
    second = client.responses.create(
        model="any", input="go on", background=True, previous_response_id=first_id
    )
    assert second.status in ("in_progress", "completed")
    assert second.previous_response_id == first_id
    assert second.conversation.id == last.response.conversation.id
    with client.responses.retrieve(second.id, stream=True) as stream:
        done = list(stream)[-1]
    assert done.type == "response.completed" and done.response.output_text == "Finished."
    # The first is not where the conversation ends any more: it cannot be continued.
    with pytest.raises(openai.ConflictError):
        client.responses.create(
            model="any", input="again", background=True, previous_response_id=first_id
        )
    with pytest.raises(openai.ConflictError):  # (and a finished response cannot be cancelled)
        client.responses.cancel(second.id)


def test_a_response_without_background_answers_when_it_ended_and_can_be_deleted(
    fake_llm: FakeLLMServer,
    serve: Callable[..., Served],
    sdk: Callable[[Served], openai.OpenAI],
) -> None:
    fake_llm.script(
        {"text": "Writing.", "tool_calls": [WRITE]},
        {"text": "Written."},
        {"text": "Streamed."},
        {"text": "Again."},
    )
    server = serve()
    client = sdk(server)
    # What every framework sends by default: no background, no stream.
    raw = client.responses.with_raw_response.create(model="any", input="write it")
    first = raw.parse()
    assert first.status == "completed" and first.output_text == "Writing.Written."
    # Whole seconds on the wire, as typed clients (LiteLLM's ResponsesAPIResponse) want them.
    assert type(raw.http_response.json()["created_at"]) is int
    assert client.responses.retrieve(first.id).model_dump() == first.model_dump()
    with client.responses.create(
        model="any", input="and now?", previous_response_id=first.id, stream=True
    ) as stream:
        second = list(stream)[-1].response
    assert second.status == "completed" and second.output_text == "Streamed."
    assert second.created_at >= first.created_at and second.previous_response_id == first.id

    # Its input: the message it was asked with.
    (asked,) = client.responses.input_items.list(second.id)
    assert (asked.type, asked.role, asked.content[0].text) == ("message", "user", "and now?")
    page = client.responses.input_items.list(first.id, order="asc", limit=1)
    assert [item.content[0].text for item in page.data] == ["write it"] and not page.has_more

    # Deleted from the conversation's end: the conversation goes on from before it.
    with pytest.raises(openai.ConflictError):
        client.responses.delete(first.id)
    client.responses.delete(second.id)
    for gone in (
        lambda: client.responses.retrieve(second.id),
        lambda: client.responses.input_items.list(second.id),
        lambda: client.responses.delete(second.id),
    ):
        with pytest.raises(openai.NotFoundError):
            gone()
    again = client.responses.create(model="any", input="again", previous_response_id=first.id)
    assert again.status == "completed" and again.previous_response_id == first.id
    with server.client() as plain:
        turns = plain.get(f"/v1/sessions/{first.conversation.id}").json()["turns"]
    # The journal keeps the deleted response's turn, rewound.
    assert [(t["user_message"]["content"][0]["text"], t["rewound"]) for t in turns] == [
        ("write it", False),
        ("and now?", True),
        ("again", False),
    ]


def test_a_waiting_request_keeps_its_connection_alive_and_its_turn_outlives_it(
    fake_llm: FakeLLMServer, serve: Callable[..., Served], tmp_path: Path
) -> None:
    gate = Gate(tmp_path / "work")
    fake_llm.script(*gated_turn("Waiting."), *gated_turn("Waiting again."))
    server = serve("--heartbeat", "0.05")
    with server.client() as c:
        with c.stream("POST", "/v1/responses", json={"model": "any", "input": "go"}) as waiting:
            assert waiting.headers["content-type"] == "application/json"
            chunks = waiting.iter_raw()
            kept_alive = next(chunks)
            assert kept_alive.strip() == b""  # white space while the turn runs
            gate.open()
            answer = json.loads(kept_alive + b"".join(chunks))
        assert answer["status"] == "completed"
        assert [i["type"] for i in answer["output"]] == ["message", "mcp_call", "message"]

        # A client that drops its request loses nothing: the turn goes on to its end.
        body = {"model": "any", "input": "again", "previous_response_id": answer["id"]}
        with c.stream("POST", "/v1/responses", json=body) as dropped:
            assert next(dropped.iter_raw()).strip() == b""
        session = answer["conversation"]["id"]
        running = c.get(f"/v1/sessions/{session}").json()["running_turn_id"]
        assert running is not None
        gate.open()
        with c.stream("GET", f"/v1/responses/resp_{running}?stream=true") as events:
            last = [line for line in events.iter_lines() if line.startswith("data: {")][-1]
        ended = json.loads(last.removeprefix("data: "))["response"]
        assert ended["status"] == "completed" and ended["previous_response_id"] == answer["id"]
