"""The task tool from the command line: ``drover -p`` shows a worker's tool calls like direct
ones, ``stream-json`` carries them as ``worker`` events, ``drover show`` lists each worker
under its call."""

from __future__ import annotations

import json
from pathlib import Path

from cli.helpers import base_args, run_drover

from drover.testing.server import FakeLLMServer

TASK = {
    "tool_calls": [
        {"name": "task", "input": {"description": "read a", "prompt": "Read a.txt, report it."}}
    ]
}


def script(server: FakeLLMServer) -> None:
    # One worker, so the one fake server sees the requests in a fixed order.
    server.script(
        TASK,
        {"tool_calls": [{"name": "read_file", "input": {"path": "a.txt"}}]},
        {"text": "a.txt says alpha"},
        {"text": "The worker says: alpha."},
    )


def test_headless_and_show(fake_llm: FakeLLMServer, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("alpha")
    script(fake_llm)
    base = base_args(fake_llm, tmp_path)
    run = run_drover(["-p", "use a worker", "--session", "s1", *base])
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "The worker says: alpha."
    assert "→ [worker 0] read_file: a.txt" in run.stderr and "✓ [worker 0] read_file" in run.stderr
    # The parent's second request carries the worker's answer only.
    last = json.dumps(fake_llm.requests[3].body)
    assert "a.txt says alpha" in last and "Read a.txt, report it." in last
    assert json.dumps(fake_llm.requests[2].body).count("alpha") == 1  # the tool output

    shown = run_drover(["show", "s1", "--db", str(tmp_path / "journal.db")])
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    at = lines.index("  tool task [output-available]")
    assert lines[at + 1] == "    worker 0 [completed]: Read a.txt, report it."
    assert lines[at + 2] == "    tool read_file [output-available]"
    assert lines[at + 3] == "      answer: a.txt says alpha"
    report = json.loads(run_drover(["show", "s1", "--json", "--db", base[5]]).stdout)
    calls = report["turns"][0]["tool_calls"]
    assert [c["name"] for c in calls] == ["task"]
    (worker,) = calls[0]["workers"]
    assert [c["name"] for c in worker["tool_calls"]] == ["read_file"]
    assert worker["usage"]["output_tokens"] > 0  # accounted per worker


def test_stream_json_worker_events(fake_llm: FakeLLMServer, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("alpha")
    script(fake_llm)
    base = base_args(fake_llm, tmp_path)
    run = run_drover(["-p", "use a worker", "--output-format", "stream-json", *base])
    assert run.returncode == 0, run.stderr
    events = [json.loads(line) for line in run.stdout.splitlines()]
    inner = [(e["worker"], e["event"]["type"]) for e in events if e["type"] == "worker"]
    assert (0, "tool_start") in inner and (0, "tool_done") in inner and (0, "done") in inner
    assert [e["type"] for e in events if e["type"] in ("done", "incomplete", "error")] == ["done"]
