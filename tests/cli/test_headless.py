"""``drover -p`` as a user runs it: a real subprocess against the fake server."""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from drover.testing.server import FakeLLMServer

from .helpers import DROVER, base_args, clean_env, run_drover


def test_answer_on_stdout_tools_on_stderr(fake_llm: FakeLLMServer, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("alpha")
    fake_llm.script(
        {"tool_calls": [{"name": "read_file", "input": {"path": "a.txt"}}]},
        {"text": "The file says alpha."},
    )
    result = run_drover(["-p", "read a.txt", *base_args(fake_llm, tmp_path)])
    assert result.returncode == 0, result.stderr
    assert result.stdout == "The file says alpha.\n"
    assert "read_file: a.txt" in result.stderr


def test_json_output_and_session_continues(fake_llm: FakeLLMServer, tmp_path: Path) -> None:
    fake_llm.script({"text": "First answer."}, {"text": "Second answer."})
    base = base_args(fake_llm, tmp_path)
    first = run_drover(["-p", "one", "--output-format", "json", "--session", "s1", *base])
    assert first.returncode == 0, first.stderr
    data = json.loads(first.stdout)
    assert data["session_id"] == "s1"
    assert data["status"] == "completed"
    assert data["text"] == "First answer."
    assert data["usage"]["output_tokens"] > 0

    second = run_drover(["-p", "two", "--output-format", "json", "--session", "s1", *base])
    assert json.loads(second.stdout)["text"] == "Second answer."
    sent = json.dumps(fake_llm.requests[1].body)
    assert "one" in sent and "First answer." in sent and "two" in sent


def test_stream_json_prints_every_event(fake_llm: FakeLLMServer, tmp_path: Path) -> None:
    fake_llm.script({"text": "Streamed."})
    result = run_drover(
        ["-p", "hi", "--output-format", "stream-json", *base_args(fake_llm, tmp_path)]
    )
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    types = [line["type"] for line in lines]
    assert types[0] == "turn_started"
    assert "text_delta" in types and "done" in types
    assert types[-1] == "result" and lines[-1]["status"] == "completed"


def test_incomplete_turn_exits_3_and_next_prompt_resumes(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    (tmp_path / "a.txt").write_text("alpha")
    fake_llm.script(
        {"tool_calls": [{"name": "read_file", "input": {"path": "a.txt"}}]},
        {"http_error": {"status": 400, "message": "bad"}},
        {"text": "Resumed with alpha."},
    )
    base = base_args(fake_llm, tmp_path)
    first = run_drover(["-p", "read", "--session", "s", "--output-format", "json", *base])
    assert first.returncode == 3
    assert json.loads(first.stdout)["status"] == "incomplete"
    assert "--session s" in first.stderr

    resumed = run_drover(["-p", "--resume-turn", "--session", "s", *base])
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.strip() == "Resumed with alpha."
    body = json.dumps(fake_llm.requests[-1].body)
    assert "alpha" in body  # the tool output of the broken turn went back to the model


def test_sigint_interrupts_keeps_work_and_exits_nonzero(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.script({"text": "Working on it slowly", "stall_after": 4}, {"text": "Resumed."})
    base = base_args(fake_llm, tmp_path)
    proc = subprocess.Popen(
        [*DROVER, "-p", "go", "--session", "s", "--output-format", "stream-json", *base],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=clean_env(ANTHROPIC_API_KEY="test"),
    )
    assert proc.stdout is not None
    for line in proc.stdout:  # wait for the first streamed text, then press Ctrl-C
        if json.loads(line)["type"] == "text_delta":
            break
    proc.send_signal(signal.SIGINT)
    rest, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    result = json.loads(rest.splitlines()[-1])
    assert result["status"] == "interrupted"
    assert "Traceback" not in err

    after = run_drover(["-p", "continue", "--session", "s", "--output-format", "json", *base])
    assert json.loads(after.stdout)["status"] == "completed"
    assert "Working" in json.dumps(fake_llm.requests[-1].body)


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["-p", "hi"], {}, "ANTHROPIC_API_KEY is not set"),
        (["-p", "hi", "--model", "nope:x"], {}, "unknown provider 'nope'"),
        (
            ["-p", "hi", "--workdir", "/nonexistent/dir"],
            {"ANTHROPIC_API_KEY": "k"},
            "working directory",
        ),
        (["-p", "hi", "--db", "/proc/nope/x.db"], {"ANTHROPIC_API_KEY": "k"}, "drover: error:"),
        (
            ["--resume-turn", "-p", "hi"],
            {"ANTHROPIC_API_KEY": "k"},
            "--resume-turn takes no prompt",
        ),
        (["-p", "hi", "--max-turns", "0"], {}, "must be at least 1"),
    ],
)
def test_bad_input_gives_one_clear_line(
    args: list[str], env: dict[str, str], message: str, tmp_path: Path
) -> None:
    if "--db" not in args:
        args = [*args, "--db", str(tmp_path / "j.db")]
    result = run_drover(args, env=clean_env(**env))
    assert result.returncode != 0
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_unreachable_server_is_one_error_line_after_retries(tmp_path: Path) -> None:
    """After the retries the config's ``[retries]`` allows (with its short back-off)."""
    config = tmp_path / "config.toml"
    config.write_text("[retries]\nmax = 2\nbackoff = 0.01\nbackoff_max = 0.02\n")
    args = ["-p", "hi", "--model", "anthropic:x", "--base-url", "http://127.0.0.1:9"]
    env = clean_env(DROVER_CONFIG=str(config))
    result = run_drover([*args, "--db", str(tmp_path / "j.db")], env=env)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("drover: error:")]
    assert len(errors) == 1 and "connection" in errors[0].lower()
    assert "gave up after 3 attempts" in errors[0]


def _wait_for_fifo(path: Path, proc: subprocess.Popen[str]) -> None:
    """Until a tool of the turn writes to the FIFO at ``path`` (the turn is then mid-tool)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        ready, _, _ = select.select([fd], [], [], 60)
        assert ready, proc.stderr.read() if proc.stderr else "no tool ran"
    finally:
        os.close(fd)


def test_sigterm_is_recorded_as_what_happened_and_text_output_prints_what_was_kept(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    os.mkfifo(tmp_path / "ready")
    fake_llm.script(
        {
            "text": "Let me look first.",
            "tool_calls": [{"name": "bash", "input": {"command": "echo x > ready; sleep 60"}}],
        }
    )
    base = [*base_args(fake_llm, tmp_path), "--sandbox", "off"]
    proc = subprocess.Popen(
        [*DROVER, "-p", "go", "--session", "s", *base],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=clean_env(ANTHROPIC_API_KEY="test"),
    )
    _wait_for_fifo(tmp_path / "ready", proc)
    proc.send_signal(signal.SIGTERM)  # what `timeout` or a service manager sends
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    # What was kept of the turn, then the status line, which does not blame the user.
    assert out == "Let me look first.\n"
    said = "interrupted: drover received SIGTERM (a timeout or a service stopping it)"
    assert f"turn {said}\n" in err
    assert "by the user" not in err and "turn incomplete" not in err
    shown = json.loads(run_drover(["show", "s", "--json", "--db", base[5]]).stdout)
    [turn] = shown["turns"]
    assert (turn["status"], turn["error"]) == ("interrupted", said)


def test_text_output_of_an_incomplete_turn_prints_the_partial_answer(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    (tmp_path / "a.txt").write_text("alpha")
    broken = {"text": "Half of the answer, then", "error_after": 6, "error": {"type": "api_error"}}
    fake_llm.script(
        {"tool_calls": [{"name": "read_file", "input": {"path": "a.txt"}}]},
        *[broken] * 3,  # the first attempt and both retries
    )
    result = run_drover(["-p", "go", *base_args(fake_llm, tmp_path)])
    assert result.returncode == 3, result.stderr
    assert result.stdout.strip() and "Half of the answer, then".startswith(result.stdout.strip())
    assert "turn incomplete (" in result.stderr


def test_after_kill_9_the_readers_call_the_dead_turn_abandoned_not_running(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    os.mkfifo(tmp_path / "ready")
    call = {"name": "bash", "input": {"command": "echo x > ready; sleep 60"}}
    fake_llm.script({"text": "Looking.", "tool_calls": [call]}, {"text": "Resumed."})
    base = [*base_args(fake_llm, tmp_path), "--sandbox", "off"]
    db = ["--db", str(tmp_path / "journal.db")]
    proc = subprocess.Popen(
        [*DROVER, "-p", "go", "--session", "s", *base],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=clean_env(ANTHROPIC_API_KEY="test"),
        start_new_session=True,  # its bash child goes with it (killpg below)
    )
    _wait_for_fifo(tmp_path / "ready", proc)
    alive = run_drover(["sessions", *db]).stdout
    assert " running " in alive, alive  # its process is alive: running, as recorded
    os.killpg(proc.pid, signal.SIGKILL)  # this test's own process group only
    proc.communicate(timeout=30)

    listed = run_drover(["sessions", *db]).stdout
    assert " abandoned " in listed and "running" not in listed, listed
    [row] = json.loads(run_drover(["sessions", "--json", *db]).stdout)
    assert (row["last_status"], row["last_abandoned"]) == ("running", True)
    shown = run_drover(["show", "s", *db]).stdout
    assert "turn 1: abandoned: recorded as running, but the process that ran it is gone" in shown
    assert "tool bash [abandoned while running]" in shown
    [turn] = json.loads(run_drover(["show", "s", "--json", *db]).stdout)["turns"]
    assert (turn["status"], turn["abandoned"]) == ("running", True)
    assert "## Turn 1 · abandoned" in run_drover(["export", "s", *db]).stdout

    # The next run recovers it: ended interrupted, no longer abandoned.
    again = run_drover(["-p", "go on", "--session", "s", *base])
    assert again.returncode == 0, again.stderr
    [row] = json.loads(run_drover(["sessions", "--json", *db]).stdout)
    assert (row["last_status"], row["last_abandoned"]) == ("completed", False)
    first = json.loads(run_drover(["show", "s", "--json", *db]).stdout)["turns"][0]
    assert (first["status"], first["abandoned"]) == ("interrupted", False)


def _wait_for_row(db: Path, query: str) -> None:
    """Until the journal at ``db`` has a row for ``query`` (another process writes it)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with contextlib.closing(sqlite3.connect(db)) as conn:
            if conn.execute(query).fetchone() is not None:
                return
        time.sleep(0.05)  # polling a condition another process makes true, bounded above
    raise AssertionError(f"no row for {query!r} in {db}")


def test_the_usage_of_a_turn_killed_mid_stream_is_kept(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.script(
        {
            "text": "A long answer that never ends",
            "stall_after": 5,
            "usage": {"input_tokens": 1234},
        },
        {"text": "Resumed."},
    )
    base = base_args(fake_llm, tmp_path)
    db = tmp_path / "journal.db"
    proc = subprocess.Popen(
        [*DROVER, "-p", "go", "--session", "s", "--output-format", "stream-json", *base],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        text=True,
        env=clean_env(ANTHROPIC_API_KEY="test"),
    )
    assert proc.stdout is not None
    for line in proc.stdout:  # the answer has begun: the API said what its input cost
        event = json.loads(line)
        if event["type"] == "usage":
            assert event["usage"]["partial"] and event["total_input"] == 1234
            break
    _wait_for_row(db, "SELECT 1 FROM events WHERE type = 'usage'")
    proc.kill()  # kill -9 mid-stream: no end of the turn is written
    proc.communicate(timeout=30)

    again = run_drover(["-p", "go on", "--session", "s", *base])  # recovers the dead turn
    assert again.returncode == 0, again.stderr
    first = json.loads(run_drover(["show", "s", "--json", "--db", str(db)]).stdout)["turns"][0]
    assert first["status"] == "interrupted"
    assert first["usage"]["input_tokens"] == 1234 and first["usage"]["partial"]
    exported = run_drover(["export", "s", "--db", str(db)]).stdout
    assert re.search(r"_1234 in · \d out tokens \(so far\)_", exported), exported
