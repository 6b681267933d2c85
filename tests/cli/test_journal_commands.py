"""``drover sessions``, ``drover show`` and ``--continue`` on a journal a real run left behind."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import pg
from support.writes import append_message, end_turn

from drover.core.messages import Message, TextBlock, user_message
from drover.store.postgres.store import PostgresStore
from drover.store.sqlite.store import SqliteStore
from drover.testing.server import FakeLLMServer

from .helpers import base_args, clean_env, run_drover

LONG = " ".join(f"word{i:03d}" for i in range(80))
BROKEN = {"text": LONG, "error_after": 12}


def test_show_lists_every_turn_tool_state_and_partial_text(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    (tmp_path / "a.txt").write_text("alpha")
    # A tool step, then an answer that breaks mid-stream on every attempt (retries exhausted).
    fake_llm.script(
        {"text": "Reading.", "tool_calls": [{"name": "read_file", "input": {"path": "a.txt"}}]},
        BROKEN,
        BROKEN,
        BROKEN,
        {"text": "Finished: alpha."},
    )
    base = base_args(fake_llm, tmp_path)
    first = run_drover(["-p", "read a.txt", "--session", "s1", *base])
    assert first.returncode == 3, first.stderr

    listed = run_drover(["sessions", "--db", base[base.index("--db") + 1]])
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split()[0] == "s1"
    assert "incomplete" in listed.stdout

    shown = run_drover(["show", "s1", "--json", "--db", str(tmp_path / "journal.db")])
    assert shown.returncode == 0, shown.stderr
    report = json.loads(shown.stdout)
    [turn] = report["turns"]
    assert turn["status"] == "incomplete" and turn["reason"] == "error"
    [call] = turn["tool_calls"]
    assert (call["name"], call["state"], call["output"]) == (
        "read_file",
        "output-available",
        "alpha",
    )
    partial = [m for m in turn["messages"] if m["partial"]]
    assert len(partial) == 1
    kept = "".join(b["text"] for b in partial[0]["content"] if b["type"] == "text")
    assert kept and LONG.startswith(kept) and kept != LONG

    text = run_drover(["show", "s1", "--db", str(tmp_path / "journal.db")])
    lines = text.stdout.splitlines()
    assert "turn 1: incomplete" in lines
    tool = lines.index("  tool read_file [output-available]")
    assert lines[tool - 1] == "  assistant: Reading."  # calls appear where they were made
    assert any(line.startswith("  assistant [partial]: word000") for line in lines[tool:])

    # --continue picks the latest session of this workdir and resumes its pending work.
    resumed = run_drover(["-p", "go on", "--continue", "--output-format", "json", *base])
    assert resumed.returncode == 0, resumed.stderr
    result = json.loads(resumed.stdout)
    assert (result["session_id"], result["status"]) == ("s1", "completed")
    sent = json.dumps(fake_llm.requests[-1].body)
    assert "alpha" in sent and kept in sent and sent.index("alpha") < sent.index("go on")


def test_show_of_an_unknown_session_is_one_line(tmp_path: Path) -> None:
    result = run_drover(["show", "nope", "--db", str(tmp_path / "journal.db")])
    assert result.returncode == 1
    assert result.stderr.strip() == "drover: error: no session nope in this journal"
    assert "Traceback" not in result.stderr


READERS_IMPORTS = """
import runpy, sys
sys.argv = ["drover", *sys.argv[1:]]
try:
    runpy.run_module("drover.cli.main", run_name="__main__")
except SystemExit:
    pass
print("loaded:", *[name for name in NAMES if name in sys.modules], file=sys.stderr)
"""

#: What ``drover sessions`` and ``drover show`` never load on SQLite: the journal's writer, the
#: SDKs and their HTTP stacks, the configuration (TOML, platformdirs), and any event-loop or
#: thread-pool machinery (asyncio alone, with ssl, socket and logging, is ~30 ms of start-up).
READERS_DO_NOT_LOAD = (
    "drover.journal.journal",
    "drover.journal.history",
    "drover.agent.agent",
    "drover.config.settings",
    "anthropic",
    "openai",
    "httpx2",
    "pydantic",
    "rich",
    "psycopg",
    "platformdirs",
    "asyncio",
    "concurrent.futures",
    "socket",
    "ssl",
    "logging",
    "threading",
)


async def _record(db: Path) -> None:
    async with SqliteStore(db) as store:
        await store.create_session(session_id="s1", workdir="/w", model="openai:m")
        turn = await store.begin_turn("s1", user_message("hello"), "test:1:1", 30.0)
        answer = Message(role="assistant", content=(TextBlock(text="Hi there."),))
        await append_message(store, turn.id, answer, step=1)
        await end_turn(store, turn.id, "completed", event={"type": "done", "text": "Hi there."})


def test_the_reading_commands_load_neither_the_journal_writer_nor_an_sdk(tmp_path: Path) -> None:
    """``drover sessions`` and ``drover show`` answer from the store alone, on the calling
    thread: their start-up is most of their time on a large journal (bench/admin_scale.py)."""
    db = tmp_path / "j.db"
    asyncio.run(_record(db))
    commands = {
        "sessions": "s1  ",
        "show s1": "  assistant: Hi there.",
        "show s1 --json": '"text": "Hi there."',
        "show nope": "",
    }
    script = f"NAMES = {READERS_DO_NOT_LOAD!r}\n{READERS_IMPORTS}"
    for command, shown in commands.items():
        done = subprocess.run(
            [sys.executable, "-c", script, *command.split(), "--db", str(db)],
            capture_output=True,
            text=True,
            env=clean_env(),
            timeout=60,
            check=False,
        )
        assert shown in done.stdout, (command, done.stdout, done.stderr)
        assert done.stderr.splitlines()[-1] == "loaded:", (command, done.stderr)


@pytest.fixture(scope="module")
def pg_cluster() -> Iterator[pg.PgCluster]:
    with pg.cluster() as cluster:
        yield cluster


def test_the_reading_commands_on_postgresql(pg_cluster: pg.PgCluster, tmp_path: Path) -> None:
    """The same commands on a PostgreSQL journal (its driver runs on an event loop)."""
    url = pg_cluster.new_schema(pg_cluster.new_database())
    assert run_drover(["sessions", "--db", url]).stdout.strip() == "no sessions yet"

    async def record() -> None:
        async with PostgresStore(url) as store:
            await store.create_session(session_id="p1", workdir="/w", model="openai:m")

    asyncio.run(record())
    listed = run_drover(["sessions", "--db", url])
    assert listed.returncode == 0, listed.stderr
    [line] = listed.stdout.splitlines()
    assert line.split()[0] == "p1" and line.split()[3:] == ["0", "turns", "empty"], line
    shown = run_drover(["show", "p1", "--json", "--db", url])
    assert shown.returncode == 0 and json.loads(shown.stdout)["id"] == "p1", shown.stderr
    missing = run_drover(["show", "nope", "--db", url])
    assert missing.stderr.strip() == "drover: error: no session nope in this journal"
