"""One path for every turn: the same scripted turn driven through the library's ``Agent``,
``drover -p``, the REPL's line mode and ``drover serve`` leaves the same journal.

Each front door runs against the fake LLM server (the real Anthropic SDK), in a workdir and a
journal of its own; the journals are then read back and compared with ids, times and paths
taken out, and each step's streamed text joined (how it was coalesced into flushes depends
on timing, not on the front door).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from server.support import TERMINAL, clean_env, read_events, start_server

from drover import Agent
from drover.config.settings import Config
from drover.core.messages import message_to_dict
from drover.store.sqlite.store import SqliteStore
from drover.testing.server import FakeLLMServer

PROMPT = "write the lighthouse notes"
SCRIPT: list[dict[str, Any]] = [
    {
        "text": "I will write the notes. " * 20,
        "tool_calls": [
            {"name": "write_file", "input": {"path": "notes.txt", "content": "lamp: on\n"}}
        ],
    },
    {
        "text": "Reading them back.",
        "tool_calls": [{"name": "read_file", "input": {"path": "notes.txt"}}],
    },
    {"text": "The notes say the lamp is on."},
]
DROVER = [sys.executable, "-m", "drover.cli.main"]


def _flags(fake: FakeLLMServer, where: Path) -> list[str]:
    return [
        "--model",
        "anthropic:test",
        "--base-url",
        fake.base_url,
        "--db",
        str(where / "journal.db"),
        "--workdir",
        str(where / "work"),
        "--permission-mode",
        "allow",
        "--sandbox",
        "off",
    ]


def _run_cli(argv: list[str], stdin: str | None = None) -> None:
    done = subprocess.run(
        [*DROVER, *argv],
        input=stdin,
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr


async def _via_agent(fake: FakeLLMServer, where: Path) -> None:
    agent = Agent(
        "anthropic:test",
        base_url=fake.base_url,
        store=str(where / "journal.db"),
        workdir=where / "work",
        permission_mode="allow",
        sandbox="off",
        config=Config(),
    )
    async with agent:
        assert (await agent.run(PROMPT)).completed


def _via_serve(fake: FakeLLMServer, where: Path) -> None:
    served = start_server(fake, where, "--sandbox", "off")
    try:
        with served.client() as client:
            sid = client.post("/v1/sessions", json={}).json()["id"]
            reply = client.post(f"/v1/sessions/{sid}/messages", json={"content": PROMPT})
            assert reply.status_code == 202, reply.text
            read_events(client, sid, until=lambda ev, _: ev.event in TERMINAL)
    finally:
        served.close()


async def _journal(db: Path, workdir: Path) -> list[Any]:
    """The journal's one session, in a form that only its content decides."""
    names: dict[str, str] = {}

    def same(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: same(v) for k, v in value.items() if k not in ("seq", "created_at")}
        if isinstance(value, list | tuple):
            return [same(v) for v in value]
        if isinstance(value, str):
            if value.startswith(("toolu_", "msg_")):  # the fake server's running counters
                names.setdefault(value, f"{value.partition('_')[0]}{len(names)}")
            if value in names:
                return names[value]
            return value.replace(str(workdir), "WORKDIR")
        return value

    async with SqliteStore(db) as store:
        (session,) = await store.list_sessions()
        out: list[Any] = [session.title]
        for turn in await store.turns(session.id):
            names[turn.id] = f"turn{turn.seq}"
            calls = await store.tool_calls(turn.id)
            for n, call in enumerate(calls):
                names[call.call_id] = f"call{n}"
            out.append(
                same(
                    {
                        "status": turn.status,
                        "reason": turn.reason,
                        "user": message_to_dict(turn.user_message) if turn.user_message else None,
                        "usage": turn.usage.to_dict() if turn.usage else None,
                        "messages": [
                            (m.seq, m.partial, message_to_dict(m.message))
                            for m in await store.turn_messages(turn.id)
                        ],
                        "calls": [
                            (c.name, c.state, dict(c.input or {}), c.output, c.is_error)
                            for c in calls
                        ],
                    }
                )
            )
        log: list[Any] = []
        for event in await store.events_after(session.id, 0):
            payload = dict(event.payload)
            if event.type == "text_delta" and log and log[-1]["type"] == "text_delta":
                log[-1]["text"] += payload["text"]  # one flush or several: the same text
                continue
            if event.type == "permission_request":
                payload.pop("request_id", None)
            payload.pop("session_id", None)
            log.append(same(payload))
        out.append(log)
        return out


async def test_every_front_door_leaves_the_same_journal(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    doors = ("agent", "print", "line-repl", "serve")
    for n, door in enumerate(doors):
        where = tmp_path / f"door{n}"  # (paths of one length: the prompt's size is the same)
        (where / "work").mkdir(parents=True)
        fake_llm.script(*SCRIPT)
        if door == "agent":
            await _via_agent(fake_llm, where)
        elif door == "print":
            _run_cli(["-p", PROMPT, *_flags(fake_llm, where)])
        elif door == "line-repl":
            _run_cli(_flags(fake_llm, where), stdin=PROMPT + "\n")
        else:
            _via_serve(fake_llm, where)
    journals = [
        await _journal(tmp_path / f"door{n}" / "journal.db", tmp_path / f"door{n}" / "work")
        for n in range(len(doors))
    ]
    reference = journals[0]
    assert reference[1]["status"] == "completed"
    assert [c[0] for c in reference[1]["calls"]] == ["write_file", "read_file"]
    for door, journal in zip(doors[1:], journals[1:], strict=True):
        assert journal == reference, f"{door} left another journal than the library"
