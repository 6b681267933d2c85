"""The AI SDK door driven by the ``ai`` package itself (DefaultChatTransport,
readUIMessageStream, AbstractChat — what ``useChat`` runs) against a real ``drover serve``: a
client that drops mid-stream resumes to the message a client that never dropped assembled; the
live message and a replay agree where the log redacted; across a SIGKILL and a restart the
resumed message is the journal's; a tool approval is answered from the chat."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from drover.testing.server import FakeLLMServer

from ..support import Served
from .support import (
    GATE_OUTPUT,
    GATED,
    SECRET,
    ChatClient,
    Gate,
    chunk_types,
    gated_turn,
    has_chunk,
    long_text,
)

WRITE = {"name": "write_file", "input": {"path": "out.txt", "content": "hello"}}


def _parts(message: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [p for p in message["parts"] if p["type"] == kind]


def _texts(message: dict[str, Any]) -> list[str]:
    return [p["text"] for p in _parts(message, "text")]


def _snapshot(server: Served, chat: str) -> dict[str, Any]:
    with server.client() as client:
        reply = client.get(f"/v1/sessions/{chat}")
        assert reply.status_code == 200, reply.text
        snapshot: dict[str, Any] = reply.json()
        return snapshot


def _assistant_texts(snapshot: dict[str, Any]) -> list[str]:
    return [
        block["text"]
        for turn in snapshot["turns"]
        for m in turn["messages"]
        if m["message"]["role"] == "assistant"
        for block in m["message"]["content"]
        if block["type"] == "text"
    ]


def test_a_client_that_drops_mid_stream_resumes_to_the_message_of_one_that_did_not(
    fake_llm: FakeLLMServer,
    serve: Callable[..., Served],
    chat_clients: Callable[[], ChatClient],
    tmp_path: Path,
) -> None:
    gate = Gate(tmp_path / "work")
    fake_llm.script(*gated_turn(long_text(300)))
    server = serve()
    dropper, follower = chat_clients(), chat_clients()
    dropped = dropper.run(op="send", url=server.url, chat="chat-1", text="go", drop_after=40)
    assert dropped["how"] == "dropped"
    assert len(dropped["chunks"]) >= 40 and dropped["chunks"][0]["type"] == "start"
    # Another tab follows the running answer from now on; the dropped client comes back.
    watching = follower.start(op="resume", url=server.url, chat="chat-1")
    resuming = dropper.start(op="resume", url=server.url, chat="chat-1")
    for client, at in ((follower, watching), (dropper, resuming)):
        client.wait_for(at, has_chunk("tool-input-available", toolName="bash"))
    gate.open()
    reference, resumed = follower.result(watching), dropper.result(resuming)
    assert reference["how"] == resumed["how"] == "finished"
    assert resumed["message"] == reference["message"]
    assert resumed["chunks"] == reference["chunks"]
    assert reference["chunks"][: len(dropped["chunks"])] == dropped["chunks"]

    message = resumed["message"]
    (turn,) = _snapshot(server, "chat-1")["turns"]
    assert message["id"] == turn["id"] and message["role"] == "assistant"
    assert _texts(message) == [long_text(300), "Released."] == _assistant_texts({"turns": [turn]})
    (tool,) = _parts(message, "dynamic-tool")
    assert tool["toolName"] == "bash" and tool["input"] == GATED["input"]
    assert tool["state"] == "output-available" and GATE_OUTPUT in tool["output"]
    assert tool["providerExecuted"] is True
    assert len(_parts(message, "step-start")) == 2
    assert chunk_types(resumed["chunks"], "finish") == [{"type": "finish", "finishReason": "stop"}]
    # The answer is over: nothing to resume.
    assert dropper.run(op="resume", url=server.url, chat="chat-1")["how"] == "none"


def test_the_live_message_and_a_replay_agree_where_the_log_redacted(
    fake_llm: FakeLLMServer,
    serve: Callable[..., Served],
    chat_clients: Callable[[], ChatClient],
    tmp_path: Path,
) -> None:
    gate = Gate(tmp_path / "work")
    fake_llm.script(*gated_turn(f"Your key is {SECRET} — keep it safe. {long_text(60)}", "Done."))
    server = serve()
    live, late = chat_clients(), chat_clients()
    at = live.start(op="send", url=server.url, chat="chat-2", text="and the key?")
    live.wait_for(at, has_chunk("tool-input-available", toolName="bash"))
    replaying = late.start(op="resume", url=server.url, chat="chat-2")
    late.wait_for(replaying, has_chunk("tool-input-available", toolName="bash"))
    gate.open()
    seen, replayed = live.result(at), late.result(replaying)
    assert seen["how"] == replayed["how"] == "finished"
    # Live deltas carry the provider's text; the step's final message, redacted, replaced it.
    assert SECRET in "".join(c.get("delta", "") for c in seen["chunks"])
    assert chunk_types(seen["chunks"], "reset-step")
    assert seen["message"] == replayed["message"]
    assert SECRET not in json.dumps(replayed) and SECRET not in json.dumps(seen["message"])
    assert "[REDACTED]" in _texts(seen["message"])[0]
    assert _texts(seen["message"]) == _assistant_texts(_snapshot(server, "chat-2"))


def test_across_a_restart_mid_turn_the_resumed_message_is_the_journal_s(
    fake_llm: FakeLLMServer,
    serve: Callable[..., Served],
    chat_clients: Callable[[], ChatClient],
    tmp_path: Path,
) -> None:
    gate = Gate(tmp_path / "work")
    fake_llm.script(
        {"text": long_text(400), "stall_after": 150},
        {"text": "Picking up where I was cut off.", "tool_calls": [GATED]},
        {"text": "All done."},
    )
    first = serve()
    client, other = chat_clients(), chat_clients()
    at = client.start(op="send", url=first.url, chat="chat-3", text="go")
    client.wait_for(
        at,
        lambda got: len([g for g in got if g.get("chunk", {}).get("type") == "text-delta"]) >= 60,
    )
    first.stop(signal.SIGKILL)
    cut = client.result(at)
    assert cut["how"] == "error", cut  # a network error: useChat resumes after it

    # The restarted server ends the dead process's turn and resumes it before it listens.
    second = serve()
    resuming = client.start(op="resume", url=second.url, chat="chat-3")
    watching = other.start(op="resume", url=second.url, chat="chat-3")
    for each, where in ((client, resuming), (other, watching)):
        each.wait_for(where, has_chunk("tool-input-available", toolName="bash"))
    gate.open()
    resumed, watched = client.result(resuming), other.result(watching)
    assert resumed["how"] == watched["how"] == "finished"
    assert resumed["message"] == watched["message"]

    snapshot = _snapshot(second, "chat-3")
    first_turn, continuation = snapshot["turns"]
    assert first_turn["status"] == "interrupted" and continuation["status"] == "completed"
    message = resumed["message"]
    # One message for the answer and the turn that went on with it, as the journal holds it.
    assert message["id"] == first_turn["id"]
    durable = _assistant_texts(snapshot)
    assert _texts(message) == durable
    assert durable[1:] == ["Picking up where I was cut off.", "All done."]
    # What the client had seen before the crash and the kept text are the same answer, one the
    # start of the other: the client may have seen more (the deltas of the last 250 ms, which
    # the crash lost and the resumed message no longer has), or less (deltas the dead process
    # had sent and flushed that the client had not read when the connection broke).
    seen = _texts(cut["message"])[0]
    assert durable[0] and (seen.startswith(durable[0]) or durable[0].startswith(seen))
    (tool,) = _parts(message, "dynamic-tool")
    assert tool["state"] == "output-available" and GATE_OUTPUT in tool["output"]
    assert len(_parts(message, "step-start")) == 3
    assert chunk_types(resumed["chunks"], "finish") == [{"type": "finish", "finishReason": "stop"}]
    assert not chunk_types(resumed["chunks"], "error")


@pytest.mark.parametrize("approved", [True, False])
def test_a_tool_approval_is_answered_from_the_chat(
    fake_llm: FakeLLMServer,
    serve: Callable[..., Served],
    chat_clients: Callable[[], ChatClient],
    tmp_path: Path,
    approved: bool,
) -> None:
    after = "Written." if approved else "It was refused."
    fake_llm.script({"text": "Writing.", "tool_calls": [WRITE]}, {"text": after})
    server = serve("--permission-mode", "ask")
    result = chat_clients().run(
        op="approve", url=server.url, chat="chat-4", text="write it", approved=approved
    )
    assert result["how"] == "finished" and result["error"] is None, result
    user, answer = result["messages"]
    assert user["role"] == "user" and answer["role"] == "assistant"
    (tool,) = _parts(answer, "dynamic-tool")
    assert tool["approval"]["approved"] is approved
    assert tool["state"] == ("output-available" if approved else "output-denied")
    assert _texts(answer) == ["Writing.", after]
    written = tmp_path / "work" / "out.txt"
    assert written.exists() is approved
    # The approval went back as the SDK sends it: the assistant message, answered.
    first, second = result["requests"]
    assert [m["role"] for m in first["messages"]] == ["user"]
    assert second["messages"][-1]["id"] == answer["id"]
    assert second["messages"][-1]["parts"][-1]["state"] == "approval-responded"
    (turn,) = _snapshot(server, "chat-4")["turns"]
    assert turn["status"] == "completed"
    assert turn["tool_calls"][0]["state"] == ("output-available" if approved else "denied")
