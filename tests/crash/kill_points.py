"""The SIGKILL kill points: what the fake model streams, when to kill, what to expect."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from support.frames import Progress, first_cut, render

from drover.cli.render import NO_TERMINAL_TEXT
from drover.core.events import ToolState

from .watch import (
    Trigger,
    chain,
    from_here,
    on_db_row,
    on_file,
    on_line,
    on_quiet,
    on_requests,
    type_on_tty,
)

#: The journal's time gate: streamed text is written at most this long after it arrived.
FLUSH_INTERVAL = 0.25
#: Allowance for the work itself: the write and its commit, the pipe, a delta printed, read
#: by this process and stamped, versus the same delta committed by the dying process. Time the
#: process spent waiting for a CPU is not in it: that is measured (see :mod:`.sched`).
PIPE_MARGIN = 0.1
#: Text read from the pipe more than this long before the kill — plus the time the process
#: waited for a CPU meanwhile, as the kernel counted it — must be in the database.
WINDOW = FLUSH_INTERVAL + PIPE_MARGIN
#: Kill points running at once (each mostly waits; the interpreter starts are the CPU cost).
WORKERS = 4
#: Per-SSE-event delay of streamed answers: 100 words stream for about two seconds.
DELAY = 0.02
#: Silence on the pipe that defines "stalled" kill points (well past the 250 ms gate), in the
#: process's own running time (see :meth:`~.watch.DroverProcess.wait_quiet`).
STALL = 0.6
#: What the fake model answers the resumed turn.
RESUME_TEXT = "Resumed after the crash."

MODELS = ["anthropic:test", "openai:test", "openai-responses:test"]


# -- scripted content -------------------------------------------------------------------------


def words(count: int, tag: str) -> str:
    """``count`` distinct 8-character words (``tag`` has 4 letters): with the fake server's
    8-character chunks every text delta is one whole word ending in a space, so any prefix is
    attributable and a flush never has to hold back half a word."""
    assert len(tag) == 4
    return "".join(f"{tag}{i:03d} " for i in range(count))


def ticking(name: str, count: int = 400, period: float = 0.05) -> str:
    """A ``bash`` command that prints progressively and leaves ``{name}_mark_N`` files as it
    goes (the observable progress a trigger waits for). It records its process group so the
    harness can end it: a SIGKILLed drover cannot end its tools' process groups."""
    return (
        f"echo $$ > {name}.pgid; for i in $(seq 1 {count}); do echo {name} tick $i; "
        f"touch {name}_mark_$i; sleep {period}; done"
    )


LONG = words(100, "word")
#: An answer without whitespace (Chinese): nothing in it can be the start of a credential.
CJK = "".join(f"第{i:03d}段内容" for i in range(100))
QUICK_OUTPUT = "quick-output\n"
DATA = "alpha\nbeta\ngamma\n"
BIG_CONTENT = "0123456789abcdef" * 30

QUICK_BASH = {"id": "toolu_bash_quick", "name": "bash", "input": {"command": "echo quick-output"}}
LONG_BASH = {"id": "toolu_bash_long", "name": "bash", "input": {"command": ticking("long")}}
READ_DATA = {"id": "toolu_read_data", "name": "read_file", "input": {"path": "data.txt"}}
WRITE_BIG = {
    "id": "toolu_write_big",
    "name": "write_file",
    "input": {"path": "big.txt", "content": BIG_CONTENT},
}
WRITE_NOTES = {
    "id": "toolu_write_notes",
    "name": "write_file",
    "input": {"path": "notes.txt", "content": "notes\n"},
}
WRITE_FIFO = {
    "id": "toolu_write_fifo",
    "name": "write_file",
    "input": {"path": "sink.fifo", "content": "never read\n"},
}
#: The file each side-effecting call creates when it really runs.
EFFECTS = {
    "toolu_bash_long": "long.pgid",
    "toolu_bash_ask": "ran.txt",
    "toolu_bash_effect": "ran.txt",
    "toolu_write_big": "big.txt",
    "toolu_write_notes": "notes.txt",
}
EFFECT_BASH = {
    "id": "toolu_bash_effect",
    "name": "bash",
    "input": {"command": "echo ran > ran.txt; echo effect-done"},
}
ASK_BASH = {
    "id": "toolu_bash_ask",
    "name": "bash",
    "input": {"command": "echo ran > ran.txt"},
}


def with_data(workdir: Path) -> None:
    (workdir / "data.txt").write_text(DATA)


def with_fifo(workdir: Path) -> None:
    """A named pipe nobody reads: writing it blocks, holding ``write_file`` in ``running``."""
    os.mkfifo(workdir / "sink.fifo")


# -- kill points ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Expect:
    """What one tool call must be after recovery."""

    state: ToolState
    outcome_unknown: bool = False
    #: The exact stored output, when the call finished.
    output: str | None = None


@dataclass(frozen=True, slots=True)
class KillPoint:
    id: str
    #: The fake model's responses, one per request (scenario format).
    responses: tuple[Mapping[str, Any], ...]
    trigger: Trigger
    calls: Mapping[str, Expect] = field(default_factory=dict)
    setup: Callable[[Path], None] | None = None
    permission_mode: str = "allow"
    #: Give the process a pseudo-terminal as stdin, so ``ask`` really waits for an answer.
    tty_stdin: bool = False
    files_absent: tuple[str, ...] = ()
    files_present: tuple[str, ...] = ()
    #: A mark set by the trigger: all text printed before that line must be stored, whatever
    #: its age (the eager flush when a tool call's input is complete).
    eager_flush_mark: str | None = None
    #: The stored text of the killed turn has at least this many characters.
    min_stored_chars: int = 0
    #: ``exec``: kill (and resume) the literal ``python -m drover.cli.main`` command line
    #: instead of a fork-server child (an interpreter start costs seconds of CPU here).
    spawn: str = "fork"
    #: The text of each model call, when :meth:`step_texts` cannot tell it from the responses.
    texts: tuple[str, ...] | None = None

    @property
    def session(self) -> str:
        return "crash-" + self.id.replace("/", "-")

    def step_texts(self) -> list[str]:
        """The text the model answers in each model call (failed attempts are retried within
        the same call, so they are not steps)."""
        if self.texts is not None:
            return list(self.texts)
        return [str(r.get("text") or "") for r in self.responses if "http_error" not in r]


def text_answer(**extra: Any) -> dict[str, Any]:
    return {"text": LONG, "delay": DELAY, **extra}


def held(response: dict[str, Any], until: Callable[[Progress], bool]) -> dict[str, Any]:
    """``response`` going silent (``stall_after``) once the process holds what ``until`` asks
    for. The watcher reads the process's output late on a loaded machine; a point whose
    process could otherwise run past it (finish the answer, run the tool) is held there, so a
    late kill still finds it in the state the point names. (The processes speak Anthropic.)"""
    count, _ = first_cut("anthropic", render("anthropic", response), until)
    return {**response, "stall_after": count}


#: A next model call that never answers: a process past the kill point waits here.
SILENT: dict[str, Any] = {"text": words(10, "late"), "stall_after": 0}


KILL_POINTS: list[KillPoint] = [
    # (a) streaming a long answer
    KillPoint("text/first-delta", (text_answer(),), on_line("text_delta")),
    KillPoint("text/early", (text_answer(),), on_line("text_delta", 25)),
    KillPoint("text/mid", (text_answer(),), on_line("text_delta", 50), spawn="exec"),
    KillPoint(
        "text/late", (held(text_answer(), lambda now: now.text == LONG),), on_line("text_delta", 95)
    ),
    KillPoint(
        "text/just-after-first-db-flush",
        (text_answer(),),
        on_db_row("SELECT 1 FROM partial_text"),
        min_stored_chars=8,
    ),
    # A set phase against the gate: the kill comes 22 deltas (~0.44 s) after the first flush
    # committed, when a 250 ms gate has written again but a gate slower than the window has
    # not (the other text points kill at whatever phase the gate happens to be in).
    KillPoint(
        "text/a-gate-period-after-a-flush",
        (text_answer(),),
        chain(on_db_row("SELECT 1 FROM partial_text"), from_here(), on_line("text_delta", 22)),
        min_stored_chars=8,
    ),
    KillPoint(
        "text/stalled-mid-answer",
        (text_answer(stall_after=3 + 40),),
        chain(on_line("text_delta", 40), on_quiet(STALL)),
        min_stored_chars=40 * 8,
    ),
    KillPoint(
        "text/stalled-mid-word",
        ({"text": words(20, "word") + "a" * 64, "delay": DELAY, "stall_after": 3 + 23},),
        chain(on_line("text_delta", 23), on_quiet(STALL)),
        min_stored_chars=20 * 8,
    ),
    KillPoint(
        "text/no-whitespace-answer-mid",
        ({"text": CJK, "delay": DELAY},),
        on_line("text_delta", 60),
        min_stored_chars=1,
    ),
    KillPoint(
        "thinking/mid-thinking",
        ({"thinking": words(60, "hmmm"), "text": words(30, "word"), "delay": DELAY},),
        on_line("thinking_delta", 20),
    ),
    KillPoint(
        "thinking/text-after-thinking",
        ({"thinking": words(20, "hmmm"), "text": LONG, "delay": DELAY},),
        on_line("text_delta", 30),
    ),
    KillPoint(
        "text/stream-failed-retry-pending",
        (text_answer(text=words(100, "fail"), error_after=3 + 30), text_answer()),
        on_line("retry"),
        texts=(LONG,),
    ),
    KillPoint(
        "text/stream-failed-second-attempt-mid",
        (text_answer(text=words(100, "fail"), error_after=3 + 30), text_answer()),
        chain(on_line("retry"), on_line("text_delta", 30)),
        texts=(LONG,),
    ),
    KillPoint(
        "text/first-call-retrying-after-529",
        ({"http_error": {"status": 529}}, text_answer()),
        on_line("retry"),
    ),
    # (b) tool calls: input streaming, running, finished, between model calls
    KillPoint(
        "tool/input-streaming",
        (
            held(
                {"text": words(5, "plan"), "tool_calls": [WRITE_BIG], "delay": DELAY},
                lambda now: bool(now.arguments),
            ),
        ),
        on_line("tool_state", call_id="toolu_write_big", state="input-streaming"),
        calls={"toolu_write_big": Expect("interrupted")},
        files_absent=("big.txt",),
    ),
    KillPoint(
        "tool/eager-flush-at-input-available",
        (
            {
                "text": words(12, "plan"),
                "tool_calls": [READ_DATA, WRITE_BIG],
                "delay": DELAY,
            },
        ),
        on_line("tool_state", call_id="toolu_read_data", state="input-available", mark="input"),
        setup=with_data,
        calls={"toolu_read_data": Expect("interrupted")},
        eager_flush_mark="input",
        min_stored_chars=12 * 8,
        files_absent=("big.txt",),
    ),
    KillPoint(
        "tool/message-done-call-not-yet-running",
        ({"text": words(6, "plan"), "tool_calls": [EFFECT_BASH]}, SILENT),
        on_line("assistant_message"),
    ),
    KillPoint(
        "bash/running-early",
        ({"text": words(3, "plan"), "tool_calls": [LONG_BASH]},),
        on_file("long_mark_3"),
        calls={"toolu_bash_long": Expect("interrupted", outcome_unknown=True)},
    ),
    KillPoint(
        "bash/running-late",
        ({"tool_calls": [LONG_BASH]},),
        on_file("long_mark_25"),
        calls={"toolu_bash_long": Expect("interrupted", outcome_unknown=True)},
    ),
    KillPoint(
        "bash/parallel-one-finished",
        ({"text": words(3, "plan"), "tool_calls": [QUICK_BASH, LONG_BASH]},),
        chain(on_line("tool_done", id="toolu_bash_quick"), on_file("long_mark_3")),
        calls={
            "toolu_bash_quick": Expect("output-available", output=QUICK_OUTPUT),
            "toolu_bash_long": Expect("interrupted", outcome_unknown=True),
        },
    ),
    KillPoint(
        "write_file/blocked-while-running",
        ({"tool_calls": [WRITE_FIFO]},),
        on_line("tool_start", id="toolu_write_fifo"),
        setup=with_fifo,
        calls={"toolu_write_fifo": Expect("interrupted", outcome_unknown=True)},
    ),
    KillPoint(
        "read_file/finished-while-bash-runs",
        ({"tool_calls": [READ_DATA, LONG_BASH]},),
        chain(on_line("tool_done", id="toolu_read_data"), on_file("long_mark_3")),
        setup=with_data,
        calls={
            "toolu_read_data": Expect("output-available", output=DATA),
            "toolu_bash_long": Expect("interrupted", outcome_unknown=True),
        },
    ),
    KillPoint(
        "write_file/finished-then-next-step-bash",
        (
            {"text": words(3, "plan"), "tool_calls": [WRITE_NOTES]},
            {"text": words(4, "next"), "tool_calls": [LONG_BASH]},
        ),
        on_file("long_mark_3"),
        calls={
            "toolu_write_notes": Expect("output-available"),
            "toolu_bash_long": Expect("interrupted", outcome_unknown=True),
        },
        files_present=("notes.txt",),
    ),
    KillPoint(
        "tools/results-sent-next-call-starting",
        ({"tool_calls": [QUICK_BASH]}, {"text": words(10, "late"), "delay": 5.0}),
        on_line("tool_results"),
        calls={"toolu_bash_quick": Expect("output-available", output=QUICK_OUTPUT)},
    ),
    KillPoint(
        "tools/next-call-open-nothing-streamed",
        ({"tool_calls": [QUICK_BASH]}, {"text": words(10, "late"), "delay": 5.0}),
        on_requests(2),
        calls={"toolu_bash_quick": Expect("output-available", output=QUICK_OUTPUT)},
    ),
    KillPoint(
        "tools/next-call-retrying-after-529",
        (
            {"tool_calls": [QUICK_BASH]},
            {"http_error": {"status": 529}},
            SILENT,
        ),
        on_line("retry"),
        calls={"toolu_bash_quick": Expect("output-available", output=QUICK_OUTPUT)},
    ),
    # (c) a permission wait held open on a terminal
    KillPoint(
        "permission/waiting-for-answer",
        ({"text": words(4, "plan"), "tool_calls": [ASK_BASH]},),
        on_line("permission_request", call_id="toolu_bash_ask"),
        permission_mode="ask",
        tty_stdin=True,
        calls={"toolu_bash_ask": Expect("interrupted")},
        files_absent=("ran.txt",),
        spawn="exec",
    ),
    KillPoint(
        "permission/waiting-after-read-finished",
        ({"tool_calls": [READ_DATA, ASK_BASH]},),
        chain(
            on_line("tool_done", id="toolu_read_data"),
            on_line("permission_request", call_id="toolu_bash_ask", anywhere=True),
        ),
        setup=with_data,
        permission_mode="ask",
        tty_stdin=True,
        calls={
            "toolu_read_data": Expect("output-available", output=DATA),
            "toolu_bash_ask": Expect("interrupted"),
        },
        files_absent=("ran.txt",),
    ),
    KillPoint(
        "permission/granted-then-running",
        ({"tool_calls": [{**LONG_BASH, "id": "toolu_bash_ask"}]},),
        chain(on_line("permission_request"), type_on_tty("y\n"), on_file("long_mark_3")),
        permission_mode="ask",
        tty_stdin=True,
        calls={"toolu_bash_ask": Expect("interrupted", outcome_unknown=True)},
    ),
    KillPoint(
        "permission/denied-without-terminal-next-call-stalls",
        (
            {"text": words(4, "plan"), "tool_calls": [ASK_BASH]},
            {"text": words(30, "late"), "delay": DELAY, "stall_after": 3 + 10},
        ),
        chain(on_line("step_started", step=2), on_line("text_delta", 10), on_quiet(STALL)),
        permission_mode="ask",
        calls={"toolu_bash_ask": Expect("denied", output=NO_TERMINAL_TEXT)},
        files_absent=("ran.txt",),
        min_stored_chars=(4 + 10) * 8,
    ),
    # (d) the next model call stalls after tools ran
    KillPoint(
        "stall/second-call-before-any-text",
        ({"tool_calls": [QUICK_BASH]}, {"text": words(30, "late"), "stall_after": 2}),
        chain(on_line("step_started", step=2), on_quiet(STALL)),
        calls={"toolu_bash_quick": Expect("output-available", output=QUICK_OUTPUT)},
    ),
    KillPoint(
        "stall/second-call-mid-text",
        (
            {"text": words(5, "plan"), "tool_calls": [QUICK_BASH]},
            {"text": words(60, "late"), "delay": DELAY, "stall_after": 3 + 25},
        ),
        chain(on_line("step_started", step=2), on_line("text_delta", 25), on_quiet(STALL)),
        calls={"toolu_bash_quick": Expect("output-available", output=QUICK_OUTPUT)},
        min_stored_chars=(5 + 25) * 8,
    ),
    KillPoint(
        "stall/third-call-after-two-tool-rounds",
        (
            {"tool_calls": [WRITE_NOTES]},
            {
                "text": words(3, "next"),
                "tool_calls": [QUICK_BASH, {**READ_DATA, "input": {"path": "notes.txt"}}],
            },
            {"text": words(40, "last"), "delay": DELAY, "stall_after": 3 + 20},
        ),
        chain(on_line("step_started", step=3), on_line("text_delta", 20), on_quiet(STALL)),
        calls={
            "toolu_write_notes": Expect("output-available"),
            "toolu_bash_quick": Expect("output-available", output=QUICK_OUTPUT),
            "toolu_read_data": Expect("output-available", output="notes\n"),
        },
        min_stored_chars=(3 + 20) * 8,
    ),
]
