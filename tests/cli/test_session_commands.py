"""Managing sessions from the command line, as real processes: ids by any unique start,
``sessions --json``, ``rename``, ``rm`` (with its question, and refused while a turn runs),
``export`` as Markdown and JSON Lines, and the ids a session may have."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from drover.testing.server import FakeLLMServer

from .helpers import DROVER, base_args, clean_env, run_drover

#: Two whole ids (drover's form: 32 hex digits) that share their first four.
A = "78f0daa6d8b1" + "a" * 20
B = "78f0ffff0000" + "b" * 20
#: Bounds a wait for the journal to show a state (never a pace).
BOUND = 30.0


def db_args(tmp_path: Path) -> list[str]:
    return ["--db", str(tmp_path / "journal.db")]


def listed(tmp_path: Path) -> list[dict[str, Any]]:
    result = run_drover(["sessions", "--json", *db_args(tmp_path)])
    assert result.returncode == 0, result.stderr
    rows: list[dict[str, Any]] = json.loads(result.stdout)
    return rows


def run_json(args: list[str]) -> dict[str, Any]:
    result = run_drover([*args, "--output-format", "json"])
    assert result.returncode == 0, result.stderr
    out: dict[str, Any] = json.loads(result.stdout)
    return out


def test_a_unique_start_of_an_id_names_the_session_everywhere(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.script(*({"text": f"Answer {n}."} for n in range(5)))
    base = base_args(fake_llm, tmp_path)
    run_json(["-p", "first in A", "--session", A, *base])  # a whole new id is taken as given
    run_json(["-p", "first in B", "--session", B, *base])

    # The 12 characters the REPL shows continue the stored session, not a new empty one.
    again = run_json(["-p", "second in A", "--session", A[:12], *base])
    assert again["session_id"] == A
    assert "first in A" in json.dumps(fake_llm.requests[-1].body)
    shown = run_drover(["show", "78f0d", "--json", *db_args(tmp_path)])
    assert shown.returncode == 0, shown.stderr
    assert [t["seq"] for t in json.loads(shown.stdout)["turns"]] == [1, 2]

    # A start that several ids share is an error listing them, wherever an id is taken.
    for args in (["show", "78f0"], ["-p", "x", "--session", "78f0"], ["--resume", "78f0"]):
        result = run_drover([*args, *base] if args[0] != "show" else [*args, *db_args(tmp_path)])
        assert result.returncode == 1, (args, result.stderr)
        error = result.stderr.strip()
        assert error.startswith("drover: error: 78f0 is the start of several session ids: "), error
        assert A in error and B in error and "(first in A)" in error and "\n" not in error

    # Hex digits that start no id read as a shortened id of another journal: refused.
    missing = run_drover(["-p", "x", "--session", "99aa0b1c2d3e", *base])
    assert missing.returncode == 1
    assert "no session id starts with 99aa0b1c2d3e" in missing.stderr
    assert "99aa0b1c2d3e-new" in missing.stderr
    assert len(listed(tmp_path)) == 2
    # A name is a new session; so are hex digits too short to be a shortened id.
    named = run_json(["-p", "hello", "--session", "fix-parser", *base])
    assert named["session_id"] == "fix-parser"
    assert run_json(["-p", "hello", "--session", "cafe", *base])["session_id"] == "cafe"
    assert {row["id"] for row in listed(tmp_path)} == {A, B, "fix-parser", "cafe"}
    # The REPL's --resume (line mode here: stdin is no terminal) takes a start too.
    resumed = subprocess.run(
        [*DROVER, "--resume", "78f0f", *base],
        input="/session\n",
        capture_output=True,
        text=True,
        env=clean_env(ANTHROPIC_API_KEY="test"),
        timeout=60,
        check=False,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert f"drover — session {B} " in resumed.stdout


def test_ids_with_spaces_or_slashes_are_usage_errors(tmp_path: Path) -> None:
    for args in (
        ["-p", "x", "--session", "my session"],
        ["-p", "x", "--session", "a/b"],
        ["--resume", "../x"],
        ["show", "a b"],
        ["rm", "a/b", "--yes"],
        ["rename", "x y", "title"],
        ["export", "é"],
    ):
        result = run_drover([*args, *db_args(tmp_path)])
        assert result.returncode == 2, (args, result.stderr)
        assert "not a session id" in result.stderr and "no spaces or '/'" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert listed(tmp_path) == []


def test_sessions_json_rename_and_export(fake_llm: FakeLLMServer, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("alpha ``` beta")
    fake_llm.script(
        {"text": "Reading.", "tool_calls": [{"name": "read_file", "input": {"path": "a.txt"}}]},
        {"text": "It says **alpha**."},
    )
    base = base_args(fake_llm, tmp_path)
    session_id = run_json(["-p", "read a.txt", *base])["session_id"]
    [row] = listed(tmp_path)
    assert row["id"] == session_id and row["title"] == "read a.txt"
    assert (row["turns"], row["last_status"], row["workdir"]) == (1, "completed", str(tmp_path))
    assert set(row) == {
        "id", "title", "model", "workdir", "created_at", "updated_at", "turns", "last_status",
        "last_abandoned",
    }  # fmt: skip
    assert row["last_abandoned"] is False

    renamed = run_drover(["rename", session_id[:8], "  The  alpha file ", *db_args(tmp_path)])
    assert renamed.returncode == 0, renamed.stderr
    assert renamed.stdout == f"renamed session {session_id}: The alpha file\n"
    assert listed(tmp_path)[0]["title"] == "The alpha file"
    for bad, why in (("   ", "cannot be empty"), ("x" * 201, "at most 200 characters")):
        refused = run_drover(["rename", session_id, bad, *db_args(tmp_path)])
        assert refused.returncode == 1 and why in refused.stderr, refused.stderr
    assert listed(tmp_path)[0]["title"] == "The alpha file"

    markdown = run_drover(["export", session_id[:8], *db_args(tmp_path)])
    assert markdown.returncode == 0, markdown.stderr
    text = markdown.stdout
    assert text.startswith("# The alpha file\n")
    assert f"- session: `{session_id}`" in text
    assert "## Turn 1 · completed" in text and "### User\n\nread a.txt" in text
    assert "**Tool `read_file`** · output-available" in text
    # The tool output holds a fence of its own: the block around it is longer.
    assert "````\nalpha ``` beta\n````" in text
    assert text.index("Reading.") < text.index("read_file") < text.index("It says **alpha**.")

    jsonl = run_drover(["export", session_id, "--format", "jsonl", *db_args(tmp_path)])
    assert jsonl.returncode == 0, jsonl.stderr
    lines = [json.loads(line) for line in jsonl.stdout.splitlines()]
    assert [line["type"] for line in lines] == [
        "session", "turn", "message", "message", "message", "tool_call",
    ]  # fmt: skip
    assert lines[0]["title"] == "The alpha file" and lines[1]["status"] == "completed"
    assert lines[-1]["output"] == "alpha ``` beta" and lines[-1]["turn_id"] == lines[1]["id"]
    assert [line["role"] for line in lines[2:5]] == ["assistant", "user", "assistant"]
    shown = json.loads(run_drover(["show", session_id, "--json", *db_args(tmp_path)]).stdout)
    assert lines[2]["content"] == shown["turns"][0]["messages"][0]["content"]


def test_rm_asks_first_unless_yes(fake_llm: FakeLLMServer, tmp_path: Path) -> None:
    fake_llm.script({"text": "One."}, {"text": "Two."})
    base = base_args(fake_llm, tmp_path)
    doomed = run_json(["-p", "doomed", *base])["session_id"]
    kept = run_json(["-p", "kept", *base])["session_id"]

    def rm(*args: str, answer: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*DROVER, "rm", *args, *db_args(tmp_path)],
            input=answer,
            capture_output=True,
            text=True,
            env=clean_env(),
            stdin=subprocess.DEVNULL if answer is None else None,
            timeout=60,
            check=False,
        )

    for answer in (None, "n\n", "\n", "yes please\n"):
        kept_back = rm(doomed, answer=answer)
        assert kept_back.returncode == 1, kept_back.stderr
        assert "doomed" in kept_back.stderr and "[y/N]" in kept_back.stderr
        assert "not deleted" in kept_back.stderr
        assert len(listed(tmp_path)) == 2
    deleted = rm(doomed[:10], answer="y\n")
    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout == f"deleted session {doomed} “doomed” (1 turn)\n"
    assert [row["id"] for row in listed(tmp_path)] == [kept]
    gone = run_drover(["show", doomed, *db_args(tmp_path)])
    assert gone.stderr.strip() == f"drover: error: no session {doomed} in this journal"
    assert rm(kept, "--yes").returncode == 0
    assert listed(tmp_path) == []
    assert rm(kept, "--yes").stderr.strip() == f"drover: error: no session {kept} in this journal"


def _wait_for_running_call(tmp_path: Path, session_id: str) -> None:
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline:
        shown = run_drover(["show", session_id, "--json", *db_args(tmp_path)])
        if shown.returncode == 0:
            turns = json.loads(shown.stdout)["turns"]
            calls = [c for t in turns for c in t["tool_calls"]]
            if calls and calls[-1]["state"] == "running":
                return
    pytest.fail(f"no running tool call in session {session_id} within {BOUND}s")


WAIT_FOR_FLAG = {
    "text": "Waiting.",
    "tool_calls": [
        {"name": "bash", "input": {"command": "while [ ! -e go.flag ]; do sleep 0.05; done"}}
    ],
}


def test_rm_refuses_a_running_turn_and_deletes_a_dead_ones(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.script(WAIT_FOR_FLAG, {"text": "Done."}, WAIT_FOR_FLAG)
    base = base_args(fake_llm, tmp_path)
    env = clean_env(ANTHROPIC_API_KEY="test")
    live = subprocess.Popen(
        [*DROVER, "-p", "wait", "--session", "live", *base],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        _wait_for_running_call(tmp_path, "live")
        busy = run_drover(["rm", "live", "--yes", *db_args(tmp_path)])
        assert busy.returncode == 1
        assert "session live is busy: its turn" in busy.stderr and "still running" in busy.stderr
        assert [row["id"] for row in listed(tmp_path)] == ["live"]
    finally:
        (tmp_path / "go.flag").touch()
        _, err = live.communicate(timeout=60)
    assert live.returncode == 0, err
    (tmp_path / "go.flag").unlink()

    # A -p killed mid-tool leaves its turn "running" with a dead owner: recovered, then deleted.
    dead = subprocess.Popen(
        [*DROVER, "-p", "wait", "--session", "dead", *base],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        _wait_for_running_call(tmp_path, "dead")
    finally:
        dead.send_signal(signal.SIGKILL)  # the sandboxed command dies with it
        dead.wait(timeout=60)
    deleted = run_drover(["rm", "dead", "--yes", *db_args(tmp_path)])
    assert deleted.returncode == 0, deleted.stderr
    assert [row["id"] for row in listed(tmp_path)] == ["live"]


def test_help_describes_the_session_commands() -> None:
    for name, words in {
        "sessions": ["--json", "last_status"],
        "rename": ["TITLE", "any unique start"],
        "rm": ["--yes", "asks first"],
        "export": ["markdown", "jsonl"],
        "show": ["any unique start"],
        "fork": ["--turn", "its number in the session"],
    }.items():
        result = run_drover([name, "--help"])
        assert result.returncode == 0, result.stderr
        flat = " ".join(result.stdout.split())
        for word in words:
            assert word in flat, (name, word, result.stdout)
    top = " ".join(run_drover(["--help"]).stdout.split())
    assert "rename, rm, export" in top and "6-31 hex digits" in top


def test_fork_copies_a_session_up_to_a_turn_then_the_copy_diverges(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.script({"text": "One."}, {"text": "Two."}, {"text": "In the fork."})
    base = base_args(fake_llm, tmp_path)
    run_json(["-p", "first", "--session", A, *base])
    run_json(["-p", "second", "--session", A, *base])

    forked = run_drover(["fork", A[:8], "--turn", "1", *db_args(tmp_path)])
    assert forked.returncode == 0, forked.stderr
    assert forked.stdout.startswith("forked session ") and "(1 turn)" in forked.stdout
    fork_id = forked.stdout.split()[2]
    shown = json.loads(run_drover(["show", fork_id, "--json", *db_args(tmp_path)]).stdout)
    assert [t["user_message"]["content"][0]["text"] for t in shown["turns"]] == ["first"]

    run_json(["-p", "third", "--session", fork_id, *base])
    sent = json.dumps(fake_llm.requests[-1].body)
    assert "first" in sent and "second" not in sent

    for args, message in [
        (["fork", A, "--turn", "9"], "no turn '9'"),
        (["fork", "nosuch"], "no session"),
    ]:
        refused = run_drover([*args, *db_args(tmp_path)])
        assert refused.returncode == 1 and message in refused.stderr, refused.stderr
        assert "Traceback" not in refused.stderr
