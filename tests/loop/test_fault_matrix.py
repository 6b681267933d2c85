"""Fault matrix: each fault × each wire protocol, checked at three levels.

For every cell: the terminal event, exactly what is pending, and the exact history the next
request carries — read back from the request body the fake server recorded and projected into a
protocol-neutral transcript that must be the same for all three protocols. The ``fake_llm``
fixture fails any cell whose requests break an API's history rules (kept strict here).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.frames import Progress, first_cut, progress, render

from drover.core.events import (
    Decision,
    Event,
    PermissionRequest,
    TextDelta,
    ToolStart,
    ToolStateChanged,
)
from drover.core.messages import Message, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock
from drover.providers.base import Provider
from drover.testing.server import FakeLLMServer
from drover.turn.loop import LoopSettings
from drover.turn.permissions import PermissionMode, PermissionPolicy
from drover.turn.state import AgentSession
from drover.turn.tool_batch import DENIED_TEXT

from .conftest import FAST, Answering, Waiting, new_session

Entry = tuple[str, str, str]  # (role, kind, detail) of one block of a request's history
Drive = Callable[[AgentSession, Path], Awaitable[list[Event]]]
Check = Callable[[list[Event], tuple[Message, ...], Path], None]
Script = Callable[[str], list[dict[str, Any]]]
Transcript = Callable[[str], list[Entry]]

# --- projections: a request body → the history it carries, protocol-neutral ---------------------


def _result(content: str, is_error: bool) -> str:
    return f"error:{content[:40]}" if is_error else f"ok:{content}"


def _project_anthropic(body: Mapping[str, Any]) -> list[Entry]:
    out: list[Entry] = []
    for message in body["messages"]:
        role, content = message["role"], message["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        for block in blocks:
            if block["type"] == "text":
                out.append((role, "text", block["text"]))
            elif block["type"] == "tool_use":
                out.append((role, "tool_use", block["name"]))
            elif block["type"] == "tool_result":
                text = block.get("content", "")
                assert isinstance(text, str), block
                out.append((role, "tool_result", _result(text, bool(block.get("is_error")))))
            else:
                raise AssertionError(f"unexpected block {block}")
    return out


def _project_chat(body: Mapping[str, Any]) -> list[Entry]:
    """Chat has no error flag: a tool result's detail is its content as sent."""
    out: list[Entry] = []
    for message in body["messages"]:
        role = message["role"]
        if role == "system":
            continue
        if role == "tool":
            out.append(("user", "tool_result", message["content"]))
            continue
        content = message.get("content")
        if isinstance(content, list):
            out += [(role, "text", part["text"]) for part in content]
        elif content is not None:
            out.append((role, "text", content))
        out += [
            (role, "tool_use", call["function"]["name"]) for call in message.get("tool_calls") or []
        ]
    return out


def _project_responses(body: Mapping[str, Any]) -> list[Entry]:
    assert "previous_response_id" not in body, "the unchained provider must send everything"
    out: list[Entry] = []
    for item in body["input"]:
        kind = item.get("type", "message")
        if kind == "reasoning" or item.get("role") in ("system", "developer"):
            continue
        if kind == "message":
            content = item["content"]
            if isinstance(content, str):
                out.append((item["role"], "text", content))
                continue
            for part in content:
                assert part["type"] in ("input_text", "output_text"), part
                out.append((item["role"], "text", part["text"]))
        elif kind == "function_call":
            out.append(("assistant", "tool_use", item["name"]))
        elif kind == "function_call_output":
            out.append(("user", "tool_result", item["output"]))
        else:
            raise AssertionError(f"unexpected input item {item}")
    return out


PROJECT: dict[str, Callable[[Mapping[str, Any]], list[Entry]]] = {
    "anthropic": _project_anthropic,
    "openai": _project_chat,
    "openai-responses": _project_responses,
}


def _matches(got: Entry, want: Entry) -> bool:
    """Exact, except a tool result: ``ok:X`` / ``error:PREFIX``, however the protocol marks it."""
    if got[:2] != want[:2]:
        return False
    if want[1] != "tool_result":
        return got[2] == want[2]
    status, _, text = want[2].partition(":")
    if status == "ok":  # Anthropic: "ok:" + content; Chat/Responses: the content itself
        return got[2] in (want[2], text)
    # Anthropic flags is_error ("error:" + first 40 chars); the others prefix "Error: ".
    return got[2].startswith((f"error:{text}", f"Error: {text}"))


def _coalesce(entries: list[Entry]) -> list[Entry]:
    """Adjacent texts of one role joined: Chat sends a user turn's texts as one string."""
    out: list[Entry] = []
    for entry in entries:
        if out and entry[1] == "text" and out[-1][:2] == entry[:2]:
            out[-1] = (entry[0], "text", f"{out[-1][2]}\n\n{entry[2]}")
        else:
            out.append(entry)
    return out


def _describe(messages: Sequence[Message]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for message in messages:
        for block in message.content:
            match block:
                case TextBlock():
                    kind = "text:partial" if block.partial else "text"
                case ToolUseBlock():
                    kind = f"tool_use:{block.name}"
                case ToolResultBlock():
                    kind = "tool_result:error" if block.is_error else "tool_result:ok"
                case ThinkingBlock():
                    kind = "thinking"
            out.append((message.role, kind))
    return out


# --- how the faulty turn is driven ---------------------------------------------------------------


def _answer(decision: Decision = "allow") -> Drive:
    async def drive(session: AgentSession, workdir: Path) -> list[Event]:
        sink = Answering(decision)
        outcome = await asyncio.wait_for(session.run("go", sink), timeout=20)
        assert sink.events[-1] == outcome.event
        return sink.events

    return drive


def _interrupt(when: Callable[[Event], bool], started: str | None = None) -> Drive:
    """Cancel the turn once ``when`` matched an event (and the file ``started`` exists)."""

    async def drive(session: AgentSession, workdir: Path) -> list[Event]:
        sink = Waiting(when)
        turn = asyncio.create_task(session.run("go", sink))
        await asyncio.wait_for(sink.seen.wait(), timeout=20)
        if started is not None:
            deadline = asyncio.get_running_loop().time() + 20
            while not (workdir / started).exists():
                assert asyncio.get_running_loop().time() < deadline, "the tool never started"
                await asyncio.sleep(0.01)
        turn.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(turn, timeout=20)
        return sink.events

    return drive


ALLOW = _answer()

# --- the rows ------------------------------------------------------------------------------------

READ_A = {"name": "read_file", "input": {"path": "a.txt"}}
READ_LONG = {"name": "read_file", "input": {"path": "a_rather_long_file_name.txt"}}
WRITE_X = {"name": "write_file", "input": {"path": "x.txt", "content": "x"}}
BASH = {"name": "bash", "input": {"command": "touch started.flag; sleep 30"}}

LONG_TEXT = "The answer is forty-two, because the question was never quite what anyone thought."
PREAMBLE = "Let me read it."
STALLED_TEXT = "Thinking about it at some length"


@dataclass(frozen=True)
class StreamCut:
    """A response cut short after the fewest SSE frames at which ``reached`` holds.

    The frames are the ones the fake server renders for the protocol (see ``support.frames``),
    so the cut follows the content — a fourth of the text, a third of a tool call's arguments —
    whatever the chunk size. ``valid`` says what the case means (e.g. "inside the text"); a
    rendering under which the cut no longer means that fails the test instead of quietly
    testing something else.
    """

    response: Mapping[str, Any]
    fault: str  # error_after | stall_after
    reached: Callable[[Progress, Progress], bool]  # (after the cut, whole stream)
    valid: Callable[[Progress, Progress], bool]

    def at(self, protocol: str, body: Mapping[str, Any] | None = None) -> tuple[int, Progress]:
        frames = render(protocol, self.response, body=body)
        final = progress(protocol, frames)[-1]
        count, state = first_cut(protocol, frames, lambda now: self.reached(now, final))
        assert self.valid(state, final), f"{protocol}: the cut after {count} frames: {state}"
        return count, state

    def scripted(self, protocol: str) -> dict[str, Any]:
        return {**self.response, self.fault: self.at(protocol)[0]}

    def kept_text(self, protocol: str) -> str:
        return self.at(protocol)[1].text


# Inside the text: a fourth of it arrived.
MID_TEXT = StreamCut(
    {"text": LONG_TEXT},
    "error_after",
    lambda now, _all: len(now.text) >= len(LONG_TEXT) // 4,
    lambda now, whole: 0 < len(now.text) < len(whole.text) == len(LONG_TEXT),
)
# Inside a tool call's input: the text finished, a third of the arguments arrived.
MID_TOOL_INPUT = StreamCut(
    {"text": PREAMBLE, "tool_calls": [READ_LONG]},
    "error_after",
    lambda now, whole: now.text == whole.text and 3 * len(now.arguments) >= len(whole.arguments),
    lambda now, whole: now.text == PREAMBLE and 0 < len(now.arguments) < len(whole.arguments),
)
# Silence once the first piece of text arrived.
FIRST_TEXT = StreamCut(
    {"text": STALLED_TEXT},
    "stall_after",
    lambda now, _all: bool(now.text),
    lambda now, whole: 0 < len(now.text) < len(whole.text) == len(STALLED_TEXT),
)


GO: Entry = ("user", "text", "go")
NEXT: Entry = ("user", "text", "next")
READ_RAN: list[Entry] = [
    GO,
    ("assistant", "tool_use", "read_file"),
    ("user", "tool_result", "ok:AAA"),
]
READ_PENDING = [("user", "text"), ("assistant", "tool_use:read_file"), ("user", "tool_result:ok")]


def _cut_inside_tool_input(events: list[Event], pending: tuple[Message, ...], _: Path) -> None:
    states = [e.state for e in events if isinstance(e, ToolStateChanged)]
    assert "input-streaming" in states and "input-available" not in states, states
    assert states[-1] == "interrupted"
    assert not any(isinstance(e, ToolStart) for e in events), "a cut-off call ran"


def _cut_while_running(events: list[Event], pending: tuple[Message, ...], _: Path) -> None:
    result = pending[-1].tool_results[0]
    assert "may have had effects" in result.content, result.content
    state = [e for e in events if isinstance(e, ToolStateChanged)][-1]
    assert state.state == "interrupted" and state.outcome_unknown


def _never_ran(events: list[Event], workdir: Path) -> list[str]:
    """The call never started and had no effect; its states, for the caller's checks."""
    assert not (workdir / "x.txt").exists()
    assert not any(isinstance(e, ToolStart) for e in events), "the call ran"
    states = [e.state for e in events if isinstance(e, ToolStateChanged)]
    assert "running" not in states, states
    return states


def _interrupted_before_it_ran(
    events: list[Event], pending: tuple[Message, ...], workdir: Path
) -> None:
    states = _never_ran(events, workdir)
    assert states[-2:] == ["awaiting-permission", "interrupted"], states
    (result,) = pending[-1].tool_results
    assert result.is_error and "before it ran" in result.content, result


def _denied(events: list[Event], pending: tuple[Message, ...], workdir: Path) -> None:
    states = _never_ran(events, workdir)
    assert states[-2:] == ["awaiting-permission", "denied"], states
    assert pending == ()


@dataclass(frozen=True)
class Row:
    id: str
    script: Script  # protocol → the responses of the faulty turn
    end: tuple[str, str | None]  # terminal event: (type, reason)
    pending: list[tuple[str, str]]
    transcript: Transcript  # protocol → the history of the next request
    drive: Drive = ALLOW
    check: Check | None = None
    policy: PermissionMode = "allow"
    settings: LoopSettings = FAST
    resume: bool = False
    #: The cut the faulty responses make, re-derived from each request the server recorded.
    cut: StreamCut | None = None


def _same(transcript: list[Entry]) -> Transcript:
    return lambda _protocol: transcript


ROWS = [
    Row(
        "completed",
        lambda p: [{"text": "Hello."}],
        ("done", None),
        [],
        _same([GO, ("assistant", "text", "Hello."), NEXT]),
    ),
    Row(
        "http-error-before-first-token",
        lambda p: [{"http_error": {"status": 400, "message": "bad request"}}],
        ("error", "error"),
        [("user", "text")],  # the prompt is kept: nothing accumulated, but nothing lost either
        _same([GO, NEXT]),
    ),
    Row(
        "stream-error-mid-text",
        lambda p: [MID_TEXT.scripted(p)] * 3,
        ("incomplete", "error"),
        [("user", "text"), ("assistant", "text:partial")],
        lambda p: [GO, ("assistant", "text", MID_TEXT.kept_text(p)), NEXT],
        cut=MID_TEXT,
    ),
    Row(
        "stream-error-mid-tool-input",
        lambda p: [MID_TOOL_INPUT.scripted(p)] * 3,
        ("incomplete", "error"),
        [("user", "text"), ("assistant", "text")],
        _same([GO, ("assistant", "text", PREAMBLE), NEXT]),
        check=_cut_inside_tool_input,
        cut=MID_TOOL_INPUT,
    ),
    Row(
        "stream-error-after-tools-ran",
        lambda p: [{"tool_calls": [READ_A]}, {"http_error": {"status": 400, "message": "nope"}}],
        ("incomplete", "error"),
        READ_PENDING,
        _same([*READ_RAN, NEXT]),
    ),
    Row(
        "empty-response-mid-loop",
        lambda p: [{"tool_calls": [READ_A]}, {"empty": True}],
        ("incomplete", "empty_response"),
        READ_PENDING,
        _same([*READ_RAN, NEXT]),
    ),
    Row(
        "turn-limit",
        lambda p: [{"tool_calls": [READ_A]}],
        ("incomplete", "max_turns"),
        READ_PENDING,
        _same(READ_RAN),  # resumed: no new user message
        settings=LoopSettings(max_turns=1, stream_retry_delay=0.0),
        resume=True,
    ),
    Row(
        "interrupt-during-stream",
        lambda p: [FIRST_TEXT.scripted(p)],
        ("incomplete", "interrupted"),
        [("user", "text"), ("assistant", "text:partial")],
        lambda p: [GO, ("assistant", "text", FIRST_TEXT.kept_text(p)), NEXT],
        drive=_interrupt(lambda e: isinstance(e, TextDelta)),
        cut=FIRST_TEXT,
    ),
    Row(
        "interrupt-during-tool-run",
        lambda p: [{"tool_calls": [BASH]}],
        ("incomplete", "interrupted"),
        [("user", "text"), ("assistant", "tool_use:bash"), ("user", "tool_result:error")],
        _same(
            [
                GO,
                ("assistant", "tool_use", "bash"),
                ("user", "tool_result", "error:Interrupted while running: it may have"),
                NEXT,
            ]
        ),
        drive=_interrupt(lambda e: isinstance(e, ToolStart), started="started.flag"),
        check=_cut_while_running,
    ),
    Row(
        "interrupt-during-permission-prompt",
        lambda p: [{"tool_calls": [WRITE_X]}],
        ("incomplete", "interrupted"),
        [("user", "text"), ("assistant", "tool_use:write_file"), ("user", "tool_result:error")],
        _same(
            [
                GO,
                ("assistant", "tool_use", "write_file"),
                ("user", "tool_result", "error:Interrupted before it ran"),
                NEXT,
            ]
        ),
        drive=_interrupt(lambda e: isinstance(e, PermissionRequest)),  # never answered
        check=_interrupted_before_it_ran,
        policy="ask",
    ),
    Row(
        "permission-denied",
        lambda p: [{"tool_calls": [WRITE_X]}, {"text": "Understood."}],
        ("done", None),
        [],
        _same(
            [
                GO,
                ("assistant", "tool_use", "write_file"),
                ("user", "tool_result", f"error:{DENIED_TEXT[:40]}"),
                ("assistant", "text", "Understood."),
                NEXT,
            ]
        ),
        drive=_answer("deny"),
        check=_denied,
        policy="ask",
    ),
]


@pytest.mark.parametrize("row", ROWS, ids=[row.id for row in ROWS])
async def test_fault_matrix(
    row: Row,
    protocol: str,
    unchained_provider: Provider,
    fake_llm: FakeLLMServer,
    tmp_path: Path,
) -> None:
    (tmp_path / "a.txt").write_text("AAA")
    fake_llm.script(*row.script(protocol))
    session = new_session(
        unchained_provider, tmp_path, policy=PermissionPolicy(row.policy), settings=row.settings
    )

    # 1. the terminal event
    events = await row.drive(session, tmp_path)
    faulty = fake_llm.requests
    if row.cut is not None:
        # The cut each request really got: its frames re-rendered for the body it sent.
        planned = row.cut.at(protocol)
        for sent in faulty:
            assert row.cut.at(protocol, sent.body) == planned, sent.body
    end = events[-1]
    assert (end.type, getattr(end, "reason", None)) == row.end, end
    # 2. exactly what is pending
    assert _describe(session.pending) == row.pending
    if row.check is not None:
        row.check(events, session.pending, tmp_path)

    # 3. the exact history of the next request
    fake_llm.script({"text": "All good."})
    sink = Answering()
    next_turn = session.resume(sink) if row.resume else session.run("next", sink)
    outcome = await asyncio.wait_for(next_turn, timeout=20)
    assert outcome.event.type == "done" and session.pending == (), outcome.event
    got = _coalesce(PROJECT[protocol](fake_llm.requests[-1].body))
    want = _coalesce(row.transcript(protocol))
    same = len(got) == len(want) and all(_matches(g, w) for g, w in zip(got, want, strict=True))
    assert same, f"next request history\n  got:      {got}\n  expected: {want}"
    # 4. the validator: the fake_llm fixture fails the test on any rule a real API enforces.
