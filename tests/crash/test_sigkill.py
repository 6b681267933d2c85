"""A real ``drover -p`` killed with SIGKILL at many points of a turn; what a new process finds.

Each kill point scripts the fake model, starts ``python -m drover.cli.main -p … --output-format
stream-json`` against it, waits for the point (a line on stdout, a file the tool writes, a row
in the database, a request at the server, or silence on the pipe), sends SIGKILL, and then —
in this process, with a new store — checks four properties:

1. recovery: ``recover_orphans`` ends the killed turn ``interrupted``; every tool call of the
   session is terminal, one that was ``running`` and side-effecting has ``outcome_unknown``;
2. no completed tool output is lost: every ``tool_done`` the process printed has its output
   stored;
3. at most the last 250 ms of streamed text is missing (see :data:`WINDOW`; time the
   process spent waiting for a CPU on a loaded machine is measured and added, see
   :mod:`.sched`), and what is stored is a prefix of what the model streamed — nothing
   invented, nothing out of order;
4. the stored history resumes: ``drover -p continue --session S`` on a copy of the database
   exits 0 against a fake server that validates the request like the real API, once per wire
   protocol, and the request carries the killed turn's tool outputs and kept text.

Interpreter starts dominate the cost (importing the provider SDKs takes about 3 s of CPU
each on the test machines), so runs are real processes forked from the warm interpreter of
:class:`~launch.ForkServer`, except the points marked ``spawn="exec"``, which kill and resume
the literal ``python -m drover.cli.main`` command line (``DROVER_CRASH_SPAWN=exec`` runs every
point that way). All kill points start up front in a small thread pool, each in its own
directory with its own fake server and database; the tests then check the results.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from drover.core.events import TERMINAL_TOOL_STATES
from drover.core.messages import TextBlock, ToolResultBlock
from drover.journal.redact import HOLD_MAX
from drover.testing import FakeLLMServer, RecordedRequest, Scenario

from .gate import CREDENTIAL_CHARS, flush_delays, flushes_by_step
from .kill_points import (
    EFFECTS,
    FLUSH_INTERVAL,
    KILL_POINTS,
    MODELS,
    RESUME_TEXT,
    WINDOW,
    WORKERS,
    KillPoint,
)
from .launch import DEADLINE, ForkServer, Launcher, drover_argv, drover_env, launcher_for
from .sched import Waits
from .watch import (
    DroverProcess,
    Finished,
    Line,
    Recovery,
    Watch,
    copy_db,
    recover,
    request_strings,
    run_to_end,
    turn_statuses,
)

# -- running a kill point ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Resumed:
    """``drover -p continue --session S`` run on a copy of the recovered database."""

    model: str
    launcher: str
    run: Finished
    requests: list[RecordedRequest]
    violations: list[str]
    unexpected: list[str]
    #: Statuses of the session's turns afterwards.
    turns: list[str]

    def describe(self) -> str:
        return (
            f"resume with {self.model} ({self.launcher}): exit {self.run.exit_code}, "
            f"result {dict(self.run.result())}\nviolations: {self.violations}\n"
            f"unexpected: {self.unexpected}\nturns: {self.turns}\n"
            f"stderr:\n{self.run.stderr[-2000:]}"
        )


@dataclass(frozen=True, slots=True)
class KillOutcome:
    point: KillPoint
    launcher: str
    workdir: Path
    lines: list[Line]
    kill_at: float
    #: Run-queue waits of the process when it started and just before the kill.
    started: Waits
    kill_waits: Waits
    #: Wall time minus monotonic time at the kill (turns stored ``created_at`` into line time).
    clock_offset: float
    exit_code: int
    marks: dict[str, int]
    stderr: str
    violations: list[str]
    unexpected: list[str]
    recovery: Recovery
    resumed: list[Resumed]

    def waits_before(self, t: float) -> Waits:
        """The run-queue sample of the last line read at or before ``t`` (else the start)."""
        before = [line.waits for line in self.lines if line.t <= t]
        return before[-1] if before else self.started

    def waits_after(self, t: float) -> Waits:
        """The sample of the first line read at or after ``t`` (else the kill's)."""
        return next((line.waits for line in self.lines if line.t >= t), self.kill_waits)

    def waited_since(self, t: float) -> float:
        """Seconds the process's threads waited for a CPU from the last line read at or
        before ``t`` (or the start) to the kill (see :mod:`.sched`)."""
        return self.kill_waits.since(self.waits_before(t))

    def describe(self) -> str:
        shown = [
            f"{line.t - self.kill_at:+.3f} (waited {self.kill_waits.since(line.waits):.3f}) "
            f"{dict(line.data)}"[:240]
            for line in self.lines
        ]
        return (
            f"kill point {self.point.id} ({self.launcher}, exit {self.exit_code}); lines, "
            "time relative to the kill (and how long the process then waited for a CPU until "
            "the kill):\n  "
            + "\n  ".join(shown[-30:])
            + ("" if self.kill_waits.by_thread else "\n(this kernel reports no run-queue waits)")
            + f"\nstderr:\n{self.stderr[-2000:]}"
        )


def end_tool_groups(workdir: Path) -> None:
    """End the process groups of ``bash`` calls the killed drover left running (they record
    ``$$`` in ``*.pgid``); a group is only signalled while its leader still works here."""
    for pgid_file in workdir.glob("*.pgid"):
        with contextlib.suppress(ValueError, OSError):
            pgid = int(pgid_file.read_text().strip())
            if Path(f"/proc/{pgid}/cwd").resolve() == workdir.resolve():
                os.killpg(pgid, signal.SIGKILL)


def resume(
    launcher: Launcher, model: str, db: Path, point: KillPoint, workdir: Path, scratch: Path
) -> Resumed:
    """The next ``drover -p`` of the session, against a server scripted with one answer."""
    scratch.mkdir()
    server = FakeLLMServer(Scenario.from_data([{"text": RESUME_TEXT}]))
    server.start()
    try:
        base_url = (
            server.anthropic_base_url if model.startswith("anthropic:") else server.openai_base_url
        )
        argv = drover_argv(
            "continue",
            base_url=base_url,
            db=db,
            session=point.session,
            workdir=workdir,
            model=model,
            output_format="json",
        )
        run = run_to_end(launcher, argv, drover_env(scratch), scratch)
    finally:
        server.stop()
    return Resumed(
        model=model,
        launcher=launcher.name,
        run=run,
        requests=server.requests,
        violations=server.violations,
        unexpected=server.unexpected,
        turns=asyncio.run(turn_statuses(db, point.session)),
    )


def run_kill_point(point: KillPoint, root: Path, fork_server: ForkServer) -> KillOutcome:
    workdir, db = root / "work", root / "drover.db"
    workdir.mkdir(parents=True)
    if point.setup is not None:
        point.setup(workdir)
    launcher = launcher_for(point.spawn, fork_server)
    server = FakeLLMServer(Scenario.from_data({"responses": list(point.responses)}))
    server.start()
    tty = tty_slave = None
    if point.tty_stdin:
        tty, tty_slave = os.openpty()
    proc: DroverProcess | None = None
    try:
        argv = drover_argv(
            "Do the task.",
            base_url=server.anthropic_base_url,
            db=db,
            session=point.session,
            workdir=workdir,
            permission_mode=point.permission_mode,
        )
        proc = DroverProcess(
            launcher, argv, env=drover_env(root), stderr_path=root / "stderr.txt", stdin=tty_slave
        )
        watch = Watch(
            proc=proc, workdir=workdir, db=db, requests=lambda: len(server.requests), tty=tty
        )
        point.trigger(watch)
        killed = proc.kill()
        clock_offset = time.time() - time.monotonic()
        started = proc.started.waits
        exit_code = proc.wait()
        lines = proc.lines()
        stderr = proc.stderr()
    finally:
        if proc is not None:
            proc.close()
        end_tool_groups(workdir)
        server.stop()
        for fd in (tty, tty_slave):
            if fd is not None:
                os.close(fd)
    recovery = asyncio.run(recover(db, point.session))
    resumed = []
    for model in MODELS:
        name = model.split(":")[0]
        copy = root / f"resume-{name}.db"
        copy_db(db, copy)
        # The literal command line resumes the points it killed; the fork server the rest.
        by = launcher if model == MODELS[0] else fork_server
        resumed.append(resume(by, model, copy, point, workdir, root / f"resume-{name}"))
    return KillOutcome(
        point=point,
        launcher=launcher.name,
        workdir=workdir,
        lines=lines,
        kill_at=killed.t,
        started=started,
        kill_waits=killed.waits,
        clock_offset=clock_offset,
        exit_code=exit_code,
        marks=dict(watch.marks),
        stderr=stderr,
        violations=server.violations,
        unexpected=server.unexpected,
        recovery=recovery,
        resumed=resumed,
    )


@pytest.fixture(scope="module")
def kill_runs(
    tmp_path_factory: pytest.TempPathFactory, fork_server: ForkServer
) -> Iterator[dict[str, Future[KillOutcome]]]:
    """Every kill point, started at once in a small pool; each test waits for its own."""
    base = tmp_path_factory.mktemp("sigkill")
    with ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="kill-point") as pool:
        # The slow literal-command-line points first, so they overlap the rest.
        ordered = sorted(KILL_POINTS, key=lambda p: p.spawn != "exec")
        futures = {
            point.id: pool.submit(
                run_kill_point, point, base / point.id.replace("/", "-"), fork_server
            )
            for point in ordered
        }
        try:
            yield futures
        finally:
            for future in futures.values():
                future.cancel()


def outcome_of(point: KillPoint, kill_runs: Mapping[str, Future[KillOutcome]]) -> KillOutcome:
    return kill_runs[point.id].result(timeout=len(KILL_POINTS) * DEADLINE)


by_id = pytest.mark.parametrize("point", KILL_POINTS, ids=[p.id for p in KILL_POINTS])


# -- 1. recovery ------------------------------------------------------------------------------


@by_id
def test_recovery_interrupts_the_turn_and_closes_every_call(
    point: KillPoint, kill_runs: dict[str, Future[KillOutcome]]
) -> None:
    out = outcome_of(point, kill_runs)
    rec = out.recovery
    why = out.describe()
    assert out.exit_code == -9, why
    assert "Traceback" not in out.stderr, why
    assert out.violations == [] and out.unexpected == [], why

    (turn_before,) = rec.turns_before
    (turn,) = rec.turns
    assert turn_before.status == "running", why
    assert rec.recovered == [turn.id], why
    assert rec.recovered_again == [], "recovery is not idempotent"
    assert turn.status == "interrupted", why
    assert turn.ended_at is not None

    before = {c.call_id: c for c in rec.calls_before}
    assert set(before) == {c.call_id for c in rec.calls}, "recovery added or lost tool calls"
    for call in rec.calls:
        assert call.state in TERMINAL_TOOL_STATES, f"{call.call_id} left {call.state}\n{why}"
        old = before[call.call_id]
        if old.state in TERMINAL_TOOL_STATES:
            assert (call.state, call.output, call.is_error, call.outcome_unknown) == (
                old.state,
                old.output,
                old.is_error,
                old.outcome_unknown,
            ), f"recovery rewrote the finished call {call.call_id}"
            continue
        assert call.state == "interrupted", call
        assert call.is_error, call
        assert call.output, f"{call.call_id}: an interrupted call needs a result text"
        running_with_effects = old.state == "running" and not old.read_only
        assert call.outcome_unknown == running_with_effects, (
            f"{call.call_id} was {old.state} (read_only={old.read_only}) when the process died; "
            f"outcome_unknown={call.outcome_unknown}"
        )

    calls = {c.call_id: c for c in rec.calls}
    for call_id, expect in point.calls.items():
        assert call_id in calls, f"{call_id} was never stored\n{why}"
        call = calls[call_id]
        assert (call.state, call.outcome_unknown) == (expect.state, expect.outcome_unknown), (
            f"{call_id}: {call.state}, outcome_unknown={call.outcome_unknown}; expected "
            f"{expect}\n{why}"
        )
        if expect.output is not None:
            assert call.output == expect.output
    for call_id, effect in EFFECTS.items():
        if call_id in calls and (out.workdir / effect).exists():
            call = calls[call_id]
            assert call.state != "interrupted" or call.outcome_unknown, (
                f"{call_id} had its effect ({effect} exists) but is recorded as never run\n{why}"
            )
    for name in point.files_absent:
        assert not (out.workdir / name).exists(), f"{name}: a call that never ran had an effect"
    for name in point.files_present:
        assert (out.workdir / name).exists(), name

    last_logged = {
        str(e.payload["call_id"]): e.payload for e in rec.events if e.type == "tool_state"
    }
    for call in rec.calls:
        logged = last_logged.get(call.call_id)
        assert logged is not None, f"{call.call_id}: no tool_state in the event log"
        assert (logged["state"], bool(logged.get("outcome_unknown"))) == (
            call.state,
            call.outcome_unknown,
        ), f"{call.call_id}: a replaying client would show {logged}, the store says {call}"

    # The rows cover the numbers 1, 2, 3… without a gap up to the crash (a coalesced text row
    # covers its deltas' numbers; two rows of one delta cut by a flush share its number); the
    # events recovery logs come after the block the dead journal had reserved, so a number a
    # client saw but that did not survive is never given to another event.
    covered, split = 0, len(rec.events)
    for i, e in enumerate(rec.events):
        if e.seq > covered + 1:
            split = i
            break
        covered = max(covered, e.end_seq)
    recovered = rec.events[split:]
    assert rec.events[0].seq == 1, "the event log has gaps"
    assert all(b.seq == a.end_seq + 1 for a, b in itertools.pairwise(recovered)), (
        "the event log has gaps"
    )
    assert all(e.turn_id == turn.id for e in recovered), "a gap before the crashed turn"
    last = rec.events[-1]
    assert last.turn_id == turn.id
    assert last.type in ("incomplete", "error"), last
    assert last.payload.get("reason") == "interrupted", last


# -- 2. finished tool outputs -----------------------------------------------------------------


@by_id
def test_no_finished_tool_output_is_lost(
    point: KillPoint, kill_runs: dict[str, Future[KillOutcome]]
) -> None:
    out = outcome_of(point, kill_runs)
    why = out.describe()
    calls = {c.call_id: c for c in out.recovery.calls}
    printed: dict[str, Mapping[str, Any]] = {}
    for line in out.lines:
        if line.type == "tool_state":
            call_id = str(line.data["call_id"])
            assert call_id in calls, f"printed call {call_id} is not in the database\n{why}"
            if line.data["state"] in TERMINAL_TOOL_STATES:
                printed[call_id] = line.data
        elif line.type == "tool_done":
            call_id = str(line.data["id"])
            final = printed.get(call_id)
            assert final is not None, f"tool_done for {call_id} without its final state"
            call = calls[call_id]
            assert call.state == final["state"], f"{call_id}: stored {call.state}\n{why}"
            assert call.state in ("output-available", "output-error", "denied")
            assert call.output == final.get("output"), f"{call_id}: stored output differs"
            assert call.is_error == bool(final.get("is_error"))

    stored = [m.message for m in out.recovery.messages]
    for line in out.lines:
        if line.type == "tool_results":
            results = line.data["message"]["content"]
            expected = [(r["tool_use_id"], r["content"]) for r in results]
            assert any(
                [(b.tool_use_id, b.content) for b in m.tool_results] == expected for m in stored
            ), f"the printed tool results message was not stored\n{why}"


# -- 3. streamed text -------------------------------------------------------------------------


def streamed_by_step(lines: list[Line]) -> dict[int, list[Line]]:
    """The text deltas printed for each model call (a discarded retry starts the step over)."""
    steps: dict[int, list[Line]] = {}
    step = 0
    for line in lines:
        if line.type == "step_started":
            step = int(line.data["step"])
            steps.setdefault(step, [])
        elif line.type == "text_delta":
            steps.setdefault(step, []).append(line)
        elif line.type == "retry" and line.data.get("discard_partial"):
            steps[step] = []
    return steps


def stored_texts(recovery: Recovery, *, before: bool = False) -> list[str]:
    """The text of each stored assistant message of the killed turn, in step order."""
    messages = recovery.messages_before if before else recovery.messages
    return [
        "".join(b.text for b in m.message.content if isinstance(b, TextBlock))
        for m in messages
        if m.message.role == "assistant"
    ]


def releasable(text: str) -> str:
    """``text`` without the tail the journal may rightly keep back while the stream runs.

    A flush writes the redacted text up to where a secret could still be arriving (see
    :mod:`drover.journal.redact`): the trailing run of characters a credential can consist of,
    at most ``HOLD_MAX`` of them. Only that much may be missing beyond the time window; text
    that cannot be part of a credential (spaces, punctuation, Chinese…) has no reason to wait.
    """
    run = 0
    while run < min(len(text), HOLD_MAX) and text[len(text) - 1 - run] in CREDENTIAL_CHARS:
        run += 1
    return text[: len(text) - run]


@by_id
def test_at_most_the_last_250_ms_of_text_is_missing(
    point: KillPoint, kill_runs: dict[str, Future[KillOutcome]]
) -> None:
    out = outcome_of(point, kill_runs)
    why = out.describe()
    scripted = point.step_texts()
    streamed = streamed_by_step(out.lines)
    stored = stored_texts(out.recovery)
    assert stored_texts(out.recovery, before=True) == stored, "recovery changed the stored text"
    finished_steps = sum(
        1 for line in out.lines if line.type == "assistant_message" and not line.data["partial"]
    )
    eager = out.marks.get(point.eager_flush_mark) if point.eager_flush_mark else None

    assert len(stored) <= max(streamed, default=0), f"text stored for a step never started\n{why}"
    position = {id(line): i for i, line in enumerate(out.lines)}
    for step in sorted(streamed):
        deltas = streamed[step]
        model_text = scripted[step - 1]
        printed = "".join(str(d.data["text"]) for d in deltas)
        kept = stored[step - 1] if step <= len(stored) else ""
        assert model_text.startswith(printed), f"step {step}: the printer invented text"
        assert model_text.startswith(kept), (
            f"step {step}: stored text is not a prefix of the streamed answer "
            f"(invented or out of order): {kept!r}\n{why}"
        )
        if step <= finished_steps:
            assert kept == model_text, f"step {step}: a finished message lost text\n{why}"
            continue
        # Due: read more than WINDOW before the kill — plus the time the process waited for a
        # CPU since that delta's flush could have started (see :mod:`.sched`) — or printed
        # before the eager-flush mark; and every delta before a due one (stored text is a
        # prefix of the answer).
        due_count = max(
            (
                i + 1
                for i, d in enumerate(deltas)
                if d.t + WINDOW + out.waited_since(d.t - FLUSH_INTERVAL) <= out.kill_at
                or (eager is not None and position[id(d)] < eager)
            ),
            default=0,
        )
        due = deltas[:due_count]
        required = releasable("".join(str(d.data["text"]) for d in due))
        assert kept.startswith(required), (
            f"step {step}: {len(required)} characters were due (streamed more than {WINDOW:g} s "
            "of the process's running time before the kill, or before an eager flush), only "
            f"{len(kept)} stored; missing "
            f"{required[len(kept) :][:80]!r}\n{why}"
        )
    assert sum(map(len, stored)) >= point.min_stored_chars, why

    # A client replaying the event log (``text_delta`` events coalesced per flush, replaced by
    # the step's ``assistant_message``) ends up with the same text, and never shows text the
    # message then takes back.
    replayed: list[str] = []
    logged: dict[int, str] = {}
    for event in out.recovery.events:
        if event.type == "text_delta":
            step = int(event.payload["step"])
            logged[step] = logged.get(step, "") + str(event.payload["text"])
        elif event.type == "retry" and event.payload.get("discard_partial"):
            logged.pop(len(replayed) + 1, None)
        elif event.type == "assistant_message":
            blocks = event.payload["message"]["content"]
            replayed.append("".join(b["text"] for b in blocks if b["type"] == "text"))
    assert replayed == stored, f"the event log replays {replayed!r}\n{why}"
    for step, text in logged.items():
        assert step <= len(stored), f"step {step}: replayed deltas without a message"
        assert stored[step - 1].startswith(text), f"step {step}: replay shows {text!r}"


@by_id
def test_the_flushes_of_streamed_text_begin_within_the_window(
    point: KillPoint, kill_runs: dict[str, Future[KillOutcome]]
) -> None:
    """The gate over the whole run, from the journal's own flush times (see :mod:`.gate`):
    the median flush begins within the window of the text it had to take."""
    out = outcome_of(point, kill_runs)
    streamed = streamed_by_step(out.lines)
    # Only the killed process's writes (recovery then appends the partial message).
    events = [e for e in out.recovery.events if e.created_at - out.clock_offset <= out.kill_at]
    flushes = flushes_by_step(events, out.clock_offset)

    def window(arrived: float, began: float) -> float:
        waited = out.waits_after(began).since(out.waits_before(arrived - FLUSH_INTERVAL))
        return WINDOW + waited

    delays = [
        found
        for step, written in sorted(flushes.items())
        for found in flush_delays(streamed.get(step, []), written, window)
    ]
    long_text = any(d and d[-1].t - d[0].t > 4 * WINDOW for d in streamed.values())
    if long_text:  # a second and more of text: several flushes to measure
        assert len(delays) >= 3, f"only {len(delays)} flushes measured\n{out.describe()}"
    if len(delays) >= 3:
        late = sorted(delays)[len(delays) // 2]
        assert late[0] <= 0, (
            f"the median flush began {late[0]:.3f} s later than allowed: {late[1]}\n"
            + "\n".join(line for _, line in delays)
            + "\n"
            + out.describe()
        )


# -- 4. the history resumes -------------------------------------------------------------------


@by_id
def test_the_history_resumes_on_every_protocol(
    point: KillPoint, kill_runs: dict[str, Future[KillOutcome]]
) -> None:
    out = outcome_of(point, kill_runs)
    assert [r.model for r in out.resumed] == MODELS
    for resumed in out.resumed:
        why = resumed.describe() + "\n" + out.describe()
        assert resumed.run.exit_code == 0, why
        assert resumed.run.result().get("status") == "completed", why
        assert resumed.violations == [], why
        assert resumed.unexpected == [], why
        assert len(resumed.requests) == 1, why
        assert resumed.turns == ["interrupted", "completed"], why
        strings = request_strings(resumed.requests[0].body)

        def sent(text: str, strings: list[str] = strings) -> bool:
            return any(text in s for s in strings)

        for call in out.recovery.calls:
            if call.state in ("output-available", "output-error"):
                assert call.output is not None
                assert sent(call.output.strip()), f"{call.call_id}: output not sent\n{why}"
        for message in out.recovery.history.pending:
            for block in message.content:
                if isinstance(block, ToolResultBlock):
                    assert sent(block.content.strip()), f"{block.tool_use_id}: no result\n{why}"
                elif isinstance(block, TextBlock) and block.text.strip():
                    assert sent(block.text.strip()), f"kept text not sent: {block.text[:60]!r}"
        assert sent("continue"), "the new prompt was not sent"
