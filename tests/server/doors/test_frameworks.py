"""drover as the model of other agent frameworks, through the Responses door of one real
``drover serve`` (with a token, the frameworks' API key): the OpenAI Agents SDK in Python and
JavaScript and pydantic-ai run a two-turn conversation with a drover tool call, the first turn
whole and the second streamed — the examples of ``docs/doors.md``, run as they are —;
``@ai-sdk/openai`` streams a turn; the ``openai`` npm SDK cancels a background response. Each
shows drover's tool calls as calls the server ran, and runs none of them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from drover.testing.server import FakeLLMServer

from ..support import Served, start_server
from .clients import EXAMPLES, SCRIPTS, run_client
from .support import GATED, Gate

TOKEN = "door-token"
FILE = {"name": "notes.txt", "text": "hello"}
#: What the model answers in the examples' conversation: each turn calls a tool, then says.
TWO_TURNS = (
    {"text": "Looking.", "tool_calls": [{"name": "glob", "input": {"pattern": "*.txt"}}]},
    {"text": "One file: notes.txt."},
    {"text": "Reading.", "tool_calls": [{"name": "read_file", "input": {"path": "notes.txt"}}]},
    {"text": "It says hello."},
)


@dataclass
class Door:
    served: Served
    fake: FakeLLMServer
    work: Path

    def get(self, path: str) -> Any:
        with self.served.client(TOKEN) as client:
            reply = client.get(path)
            assert reply.status_code == 200, reply.text
            return reply.json()

    def session_ids(self) -> set[str]:
        return {s["id"] for s in self.get("/v1/sessions?limit=200")["sessions"]}


@pytest.fixture(scope="module")
def door(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Door]:
    """One server for the module; each test scripts its model's answers and uses them all."""
    fake = FakeLLMServer()
    fake.start()
    tmp = tmp_path_factory.mktemp("frameworks")
    (tmp / "work").mkdir()
    (tmp / "work" / FILE["name"]).write_text(FILE["text"])
    served = start_server(fake, tmp, "--token", TOKEN)
    try:
        yield Door(served, fake, tmp / "work")
    finally:
        served.close()
        fake.stop()
    assert not fake.violations and not fake.unexpected, (fake.violations, fake.unexpected)


def _conversation(door: Door, script: Path, tmp_path: Path) -> list[str]:
    """What ``script`` prints running the examples' conversation, which the journal holds."""
    before = door.session_ids()
    door.fake.script(*TWO_TURNS)
    printed = run_client(script, door.served.url, TOKEN, tmp_path).splitlines()
    assert door.fake.remaining == 0
    (session,) = door.session_ids() - before
    turns = door.get(f"/v1/sessions/{session}")["turns"]
    assert [t["status"] for t in turns] == ["completed", "completed"]
    asked = [t["user_message"]["content"][0]["text"] for t in turns]
    assert asked == ["Which files are here?", "What does it say?"]
    ran = [(c["name"], c["state"]) for t in turns for c in t["tool_calls"]]
    assert ran == [("glob", "output-available"), ("read_file", "output-available")]
    return printed


def _example_output() -> list[str]:
    """What the page says each example prints (the calls drover ran as its framework reports
    them, the first answer, and the second as it streamed: both its model calls' text)."""
    page = (EXAMPLES.parent / "docs" / "doors.md").read_text(encoding="utf-8")
    shown = page.split("Each prints, for the examples' conversation", 1)[1]
    return shown.split("```text\n", 1)[1].split("```", 1)[0].splitlines()


EXAMPLE_OUTPUT = _example_output()


def test_the_agents_sdk_in_python_has_drover_as_its_model(door: Door, tmp_path: Path) -> None:
    printed = _conversation(door, EXAMPLES / "responses_agents_sdk.py", tmp_path)
    assert printed == EXAMPLE_OUTPUT


def test_the_agents_sdk_in_javascript_has_drover_as_its_model(door: Door, tmp_path: Path) -> None:
    printed = _conversation(door, EXAMPLES / "responses_agents_sdk.mjs", tmp_path)
    assert printed == EXAMPLE_OUTPUT


def test_pydantic_ai_has_drover_as_its_model(door: Door, tmp_path: Path) -> None:
    printed = _conversation(door, EXAMPLES / "responses_pydantic_ai.py", tmp_path)
    assert printed == EXAMPLE_OUTPUT


def test_ai_sdk_openai_streams_a_turn_with_drover_s_tool_call(door: Door, tmp_path: Path) -> None:
    door.fake.script(*TWO_TURNS[:2])
    lines = run_client(SCRIPTS / "ai_sdk_stream.mjs", door.served.url, TOKEN, tmp_path)
    *parts, finish = [json.loads(line) for line in lines.splitlines()]
    assert door.fake.remaining == 0
    assert finish == {"finishReason": "stop"}  # (not tool-calls: nothing is the client's)
    text = "".join(p["text"] for p in parts if p["type"] == "text-delta")
    assert text == "Looking.One file: notes.txt."
    (call,) = [p for p in parts if p["type"] == "tool-call"]
    (result,) = [p for p in parts if p["type"] == "tool-result"]
    assert call["providerExecuted"] is True and call["toolName"] == "mcp.glob"
    assert call["input"] == {"pattern": "*.txt"}
    assert result["toolCallId"] == call["toolCallId"] and result["providerExecuted"] is True
    assert result["output"]["serverLabel"] == "drover"
    assert result["output"]["output"] == FILE["name"]
    assert [p["type"] for p in parts].count("finish-step") == 1


def test_the_openai_npm_sdk_cancels_a_background_response(door: Door, tmp_path: Path) -> None:
    (door.work / "gate").unlink(missing_ok=True)
    Gate(door.work)  # never opened: the call waits until the cancel cuts it off
    door.fake.script({"text": "Working on it.", "tool_calls": [GATED]})
    printed = run_client(SCRIPTS / "cancel.mjs", door.served.url, TOKEN, tmp_path)
    (door.work / "gate").unlink()
    assert door.fake.remaining == 0
    done = json.loads(printed)
    cancelled, last = done["cancelled"], done["last"]
    assert cancelled["status"] == "cancelled" and cancelled["drover_reason"] == "interrupted"
    assert last["type"] == "response.incomplete" and last["response"] == cancelled
    message, call = cancelled["output"]
    assert message["content"][0]["text"] == "Working on it."
    assert (call["type"], call["name"], call["status"]) == ("mcp_call", "bash", "incomplete")
    assert "nterrupted" in call["error"]["content"][0]["text"]
