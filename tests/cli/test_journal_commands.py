"""``drover sessions``, ``drover show`` and ``--continue`` on a journal a real run left behind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from drover.testing.server import FakeLLMServer

from .helpers import base_args, run_drover

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
heavy = ["drover.store.journal", "drover.store.history", "anthropic", "openai", "psycopg"]
print("loaded:", *[name for name in heavy if name in sys.modules], file=sys.stderr)
"""


def test_the_reading_commands_load_neither_the_journal_writer_nor_an_sdk(tmp_path: Path) -> None:
    """``drover sessions`` and ``drover show`` answer from the store alone: their start-up is
    most of their time on a large journal (bench/admin_scale.py)."""
    db = str(tmp_path / "j.db")
    for command in (["sessions", "--db", db], ["show", "nope", "--db", db]):
        done = subprocess.run(
            [sys.executable, "-c", READERS_IMPORTS, *command],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.stderr.splitlines()[-1] == "loaded:", (command, done.stderr)
