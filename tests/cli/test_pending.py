"""Unfinished work across ``-p`` runs: told when it is resent, dropped with --discard-pending."""

from __future__ import annotations

import json
from pathlib import Path

from drover.testing.server import FakeLLMServer

from .helpers import base_args, run_drover

REFUSED = {"http_error": {"status": 400, "message": "prompt is malformed"}}


def test_a_refused_request_says_resending_fails_and_discard_pending_drops_it(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.script(REFUSED, {"text": "Fresh start."})
    base = base_args(fake_llm, tmp_path)
    failed = run_drover(["-p", "bad request", "--session", "s", "--output-format", "json", *base])
    assert failed.returncode == 1
    result = json.loads(failed.stdout)
    assert (result["status"], result["retryable"]) == ("failed", False)
    assert "resending will fail the same way" in failed.stderr
    assert "--discard-pending" in failed.stderr
    assert "Traceback" not in failed.stderr

    dropped = run_drover(["-p", "--discard-pending", "--session", "s", *base])
    assert dropped.returncode == 0, dropped.stderr
    assert "discarded 1 pending message" in dropped.stdout
    assert len(fake_llm.requests) == 1  # discarding alone asks no model

    fresh = run_drover(["-p", "new request", "--session", "s", *base])
    assert fresh.returncode == 0, fresh.stderr
    assert fresh.stdout == "Fresh start.\n"
    assert "unfinished work" not in fresh.stderr
    sent = json.dumps(fake_llm.requests[-1].body)
    assert "new request" in sent and "bad request" not in sent


def test_pending_work_sent_with_a_new_prompt_is_announced(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    (tmp_path / "a.txt").write_text("alpha")
    fake_llm.script(
        {"tool_calls": [{"name": "read_file", "input": {"path": "a.txt"}}]},
        {"text": "Both done."},
    )
    base = base_args(fake_llm, tmp_path)
    paused = run_drover(["-p", "first", "--session", "s", "--max-turns", "1", *base])
    assert paused.returncode == 3
    assert "resending will fail" not in paused.stderr  # the turn limit is not the request

    second = run_drover(["-p", "second", "--session", "s", *base])
    assert second.returncode == 0, second.stderr
    assert (
        "3 messages of unfinished work from earlier turns go before this prompt; "
        "--discard-pending drops them"
    ) in second.stderr
    sent = json.dumps(fake_llm.requests[-1].body)
    assert sent.index("first") < sent.index("second")


def test_discard_pending_with_a_prompt_drops_then_runs(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.script(REFUSED, {"text": "Only the new one."})
    base = base_args(fake_llm, tmp_path)
    assert run_drover(["-p", "bad request", "--session", "s", *base]).returncode == 1
    run = run_drover(["-p", "new request", "--discard-pending", "--session", "s", *base])
    assert run.returncode == 0, run.stderr
    assert run.stdout == "Only the new one.\n"
    assert "unfinished work" not in run.stderr
    sent = json.dumps(fake_llm.requests[-1].body)
    assert "new request" in sent and "bad request" not in sent


def test_discard_pending_of_an_unknown_session_creates_nothing(tmp_path: Path) -> None:
    db = str(tmp_path / "journal.db")
    result = run_drover(["-p", "--discard-pending", "--session", "typo", "--db", db])
    assert result.returncode == 1
    assert result.stderr.strip() == "drover: error: no session typo in this journal"
    listed = run_drover(["sessions", "--db", db])
    assert listed.stdout.strip() == "no sessions yet"
