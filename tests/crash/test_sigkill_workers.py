"""A real ``drover -p`` killed with SIGKILL while three workers of a ``task`` call run: one
has answered, one runs a long ``bash`` command, one is stalled mid-answer. A new process
recovers the database, and the next message resumes the two unfinished workers from their
own pending state — not the finished one — then the parent, on each wire protocol.

Which worker gets which reply depends on the order their requests reach the one fake server,
so the checks are about the three roles, not the indexes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from pathlib import Path

import pytest

from drover.core.events import TERMINAL_TOOL_STATES
from drover.runtime.workers import RESULT_HEADER, worker_states
from drover.testing import FakeLLMServer, Scenario

from .kill_points import MODELS, RESUME_TEXT
from .launch import ForkServer, drover_argv, drover_env, launcher_for
from .watch import DroverProcess, Line, copy_db, poll_until, recover, run_to_end

SESSION = "workers-kill"
QUICK = "The quick worker's whole answer."
STALLED = "The stalled worker had begun to say something long"
RESUMED = "A resumed worker's answer."
LONG = "echo $$ > long.pgid; sleep 60"
NOTES = "the notes say forty-two"
TASKS = [{"description": f"part {i}", "prompt": f"Do part {i} of the job."} for i in range(3)]

KILLED_RUN = [
    {"tool_calls": [{"name": "task", "id": "toolu_task", "input": {"tasks": TASKS}}]},
    {"text": QUICK},
    {
        "tool_calls": [
            {"name": "read_file", "id": "toolu_read", "input": {"path": "notes.txt"}},
            {"name": "bash", "id": "toolu_long", "input": {"command": LONG}},
        ]
    },
    {"text": STALLED, "stall_after": 7},
]


def _inner(line: Line, kind: str) -> bool:
    event = line.data.get("event")
    return line.type == "worker" and isinstance(event, dict) and event.get("type") == kind


def _kill_mid_workers(root: Path, fork_server: ForkServer) -> DroverProcess:
    workdir, db = root / "work", root / "drover.db"
    server = FakeLLMServer(Scenario.from_data({"responses": KILLED_RUN}))
    server.start()
    proc = DroverProcess(
        launcher_for("fork", fork_server),
        drover_argv(
            "split the job in three",
            base_url=server.anthropic_base_url,
            db=db,
            session=SESSION,
            workdir=workdir,
        ),
        env=drover_env(root),
        stderr_path=root / "stderr.txt",
    )
    try:
        proc.wait_line(lambda line: _inner(line, "done"), what="a worker's answer")
        proc.wait_line(lambda line: _inner(line, "text_delta"), what="the stalled worker's text")
        poll_until((workdir / "long.pgid").exists, "the long bash command", proc)
        # Past the 250 ms text gate, so the stalled worker's text is durable.
        proc.wait_quiet(0.6)
        assert len(server.requests) == 4
        proc.kill()
        proc.wait()
    finally:
        proc.close()
        server.stop()
        with contextlib.suppress(OSError, ValueError):
            os.killpg(int((workdir / "long.pgid").read_text()), signal.SIGKILL)
    return proc


@pytest.fixture(scope="module")
def killed(tmp_path_factory: pytest.TempPathFactory, fork_server: ForkServer) -> Path:
    root = tmp_path_factory.mktemp("workers-kill")
    (root / "work").mkdir()
    (root / "work" / "notes.txt").write_text(NOTES)
    _kill_mid_workers(root, fork_server)
    return root


def test_recovery_keeps_the_finished_worker_and_closes_every_call(killed: Path) -> None:
    recovery = asyncio.run(recover(killed / "drover.db", SESSION))
    assert [t.status for t in recovery.turns] == ["interrupted"]
    assert all(c.state in TERMINAL_TOOL_STATES for c in recovery.calls)
    (long_call,) = [c for c in recovery.calls if c.call_id.endswith("/toolu_long")]
    assert long_call.state == "interrupted" and long_call.outcome_unknown
    (read_call,) = [c for c in recovery.calls if c.call_id.endswith("/toolu_read")]
    assert read_call.state == "output-available" and read_call.output == NOTES
    states = worker_states([e.payload for e in recovery.events], "toolu_task")
    assert sorted(states) == [0, 1, 2]
    finished = [s for s in states.values() if s.finished]
    assert len(finished) == 1 and finished[0].ended is not None
    assert finished[0].ended["text"] == QUICK
    kept = [
        m.text
        for s in states.values()
        if not s.finished
        for m in s.messages
        if m.role == "assistant"
    ]
    assert any(STALLED.startswith(text) and text for text in kept), kept


@pytest.mark.parametrize("model", MODELS)
def test_resume_runs_only_the_unfinished_workers(
    killed: Path, model: str, fork_server: ForkServer, tmp_path: Path
) -> None:
    asyncio.run(recover(killed / "drover.db", SESSION))
    db = tmp_path / "drover.db"
    copy_db(killed / "drover.db", db)
    server = FakeLLMServer(
        Scenario.from_data([{"text": RESUMED}, {"text": RESUMED}, {"text": RESUME_TEXT}])
    )
    server.start()
    try:
        base_url = (
            server.anthropic_base_url if model.startswith("anthropic:") else server.openai_base_url
        )
        argv = drover_argv(
            "continue",
            base_url=base_url,
            db=db,
            session=SESSION,
            workdir=killed / "work",
            model=model,
            output_format="json",
        )
        run = run_to_end(launcher_for("fork", fork_server), argv, drover_env(tmp_path), tmp_path)
    finally:
        server.stop()
    assert run.exit_code == 0, run.stderr
    assert run.result()["text"] == RESUME_TEXT
    assert not server.violations and not server.unexpected, (server.violations, server.unexpected)
    # Two workers went on — the finished one was not asked again — then the parent.
    bodies = [json.dumps(r.body) for r in server.requests]
    assert len(bodies) == 3
    workers, parent = bodies[:2], bodies[2]
    # The cut-off worker sees its finished read_file's real output, and its bash call as
    # cut off with an unknown outcome.
    assert any("may have had effects" in b and NOTES in b for b in workers), workers
    assert any("The stalled worker" in b for b in workers)
    assert RESULT_HEADER in parent and QUICK in parent and parent.count(RESUMED) == 2
    assert "Output before it was cut off" not in parent
