"""The REPL's command line: a first prompt, ``--resume ID``, and no collision with subcommands."""

from __future__ import annotations

import json
from pathlib import Path

from drover.testing.server import FakeLLMServer

from .helpers import base_args, run_drover


def test_a_subcommand_name_as_a_prompt_is_refused_unless_after_double_dash(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    args = base_args(fake_llm, tmp_path)
    for name in ("sessions", "show", "serve", "fake-llm", "models", "demo"):
        result = run_drover([*args, name])
        assert result.returncode == 2, result.stderr
        assert f"'{name}' is a subcommand" in result.stderr and "Traceback" not in result.stderr
    fake_llm.script({"text": "You asked about sessions."})
    result = run_drover([*args, "--", "sessions"])
    assert result.returncode == 0, result.stderr
    assert "You asked about sessions." in result.stdout
    assert "sessions" in json.dumps(fake_llm.requests[-1].body["messages"])


def test_a_first_prompt_opens_the_repl_with_it_sent(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.script({"text": "First reply."})
    result = run_drover([*base_args(fake_llm, tmp_path), "--session", "s1", "say hi"])
    assert result.returncode == 0, result.stderr
    assert "First reply." in result.stdout
    shown = run_drover(["show", "s1", "--db", str(tmp_path / "journal.db")])
    assert "user: say hi" in shown.stdout


def test_resume_needs_a_stored_session_and_the_repl(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    args = base_args(fake_llm, tmp_path)
    missing = run_drover([*args, "--resume", "nope"])
    assert missing.returncode == 1
    assert missing.stderr.strip() == "drover: error: no session nope in this journal"
    headless = run_drover([*args, "--resume", "s1", "-p", "x"])
    assert headless.returncode == 2 and "with -p use --session ID" in headless.stderr
    both = run_drover([*args, "--resume", "s1", "--continue"])
    assert both.returncode == 2 and "only one of --session, --continue and --resume" in both.stderr
    mixed = run_drover([*args, "-p", "one", "two"])
    assert mixed.returncode == 2 and "put it after -p" in mixed.stderr
