"""Terminal consumers of turn events for headless mode and the REPL.

Answer text goes to stdout; tool activity, retries and the turn's end go to stderr, so
``drover -p … > answer.txt`` captures only the answer. In ``stream-json`` mode every event is a
JSON line on stdout. Permission requests are answered here: on a terminal by asking the user
(through the process's one :class:`~drover.cli.stdin.StdinLines`, so an abandoned question
takes no line away from what reads next), otherwise by the ``--permission-mode`` already
applied (a request that still arrives without a terminal is denied, with a note).

A reader that goes away (``drover -p … | head -1``) ends the printing, not the turn: output
then goes to ``/dev/null`` and the turn runs to its end and is journaled as usual.

What reaches a terminal shows, and never acts: every line on stderr (tool calls, permission
questions, errors) and the answer streamed to a terminal go through
:func:`~drover.core.visible.visible`, and ``stream-json`` on a terminal is written as ASCII JSON. An
answer written to a pipe or a file is the model's text, byte for byte.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from dataclasses import dataclass, field
from typing import Literal, TextIO, TypeAlias

from drover.cli.stdin import StdinLines
from drover.core.events import (
    AssistantMessage,
    Compacted,
    Decision,
    Done,
    Error,
    Event,
    HookRun,
    Incomplete,
    PermissionRequest,
    Retry,
    TextDelta,
    ToolDone,
    ToolStart,
    TurnStarted,
    WorkerEvent,
    event_to_dict,
)
from drover.core.rules import always_scope
from drover.core.visible import visible

OutputFormat: TypeAlias = Literal["text", "json", "stream-json"]
#: What the model is told of a call refused because nobody could be asked.
NO_TERMINAL_TEXT = (
    "Not run: this call needs the user's permission and there was no terminal to ask, so "
    "it was refused without asking (--permission-mode allow or an --allow rule permits it)."
)


def point_at_devnull(stream: TextIO | None = None) -> None:
    """Point standard output (or ``stream``, stderr say) at /dev/null once its reader has gone
    (the Python docs' way for a closed pipe), so no later write, nor the flush at exit, raises
    again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, (stream or sys.stdout).fileno())
    finally:
        os.close(devnull)


def write(stream: TextIO, text: str) -> bool:
    """Write and flush; False (and nothing raised) when the reader of the stream is gone."""
    try:
        stream.write(text)
        stream.flush()
    except BrokenPipeError:
        if stream is sys.stdout or stream is sys.stderr:
            point_at_devnull(stream)
        return False
    return True


def pending_note(count: int, flag: str, new: str = "prompt") -> str | None:
    """What to say when ``count`` messages of earlier unfinished work go before a new one."""
    if not count:
        return None
    one = count == 1
    return (
        f"{count} message{'' if one else 's'} of unfinished work from earlier turns "
        f"{'goes' if one else 'go'} before this {new}; {flag} drops {'it' if one else 'them'}"
    )


def _decision(answer: bytes) -> Decision:
    text = answer.decode(errors="replace").strip().lower()
    if text in ("a", "always"):
        return "always"
    if text in ("y", "yes"):
        return "allow"
    return "deny"


def incomplete_line(event: Incomplete) -> str:
    """The status line of a turn that ended with its work kept."""
    if event.reason == "interrupted":
        # "interrupted by the user", "interrupted: drover received SIGTERM …"
        said = (
            event.error if event.error.startswith("interrupted") else f"interrupted: {event.error}"
        )
        return f"turn {said}"
    return f"turn incomplete ({event.reason}): {event.error}"


@dataclass
class HeadlessPrinter:
    """An event sink that prints a turn for ``drover -p`` and the REPL.

    With ``lines`` (stdin is a terminal) permission requests are asked there; without, they
    are denied with a note. Call :meth:`aclose` when the turn is over: it withdraws a question
    still waiting for its answer.
    """

    output_format: OutputFormat
    lines: StdinLines | None = None
    #: Said on stderr once the turn has begun (not when it is refused before, e.g. busy).
    preamble: str | None = None
    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)
    _live_text: bool = False
    _mid_line: bool = False
    #: The text of the turn's last assistant message (partial too), for a pipe: printed when
    #: the turn ends incomplete, as it printed a finished turn's answer.
    _kept: str = ""
    _closed: set[int] = field(default_factory=set)
    _questions: set[asyncio.Task[None]] = field(default_factory=set)
    _asking: asyncio.Lock = field(default_factory=asyncio.Lock)

    def __post_init__(self) -> None:
        # Live text only where a person watches; a pipe gets the final answer once.
        self._live_text = self.output_format == "text" and self.out.isatty()

    async def send(self, event: Event) -> None:
        if isinstance(event, PermissionRequest):
            self._answer(event)
        elif isinstance(event, TurnStarted) and self.preamble:
            self._line(self.err, self.preamble)
        if self.output_format == "stream-json":
            # (On a terminal as ASCII: JSON leaves C1 controls and bidi overrides as they are.)
            ascii_only = self.out.isatty()
            self._line(self.out, json.dumps(event_to_dict(event), ensure_ascii=ascii_only))
            return
        match event:
            case TextDelta() if self._live_text:
                self._write(self.out, event.text)
                self._mid_line = not event.text.endswith("\n")
            case AssistantMessage() if self._live_text and self._mid_line:
                self._line(self.out, "")
                self._mid_line = False
            case AssistantMessage() if event.message.text:
                self._kept = event.message.text
            case ToolStart():
                self._line(self.err, f"→ {event.input_summary}")
            case ToolDone():
                mark = "✗" if event.is_error else "✓"
                self._line(self.err, f"  {mark} {event.name}: {event.output_summary}")
            case HookRun() if event.outcome != "passed":
                said = event.message.strip().splitlines()[0] if event.message.strip() else ""
                self._line(
                    self.err,
                    f"  {event.point} hook ({event.hook}) {event.outcome.replace('_', ' ')} "
                    f"{event.name}{': ' + said if said else ''}",
                )
            case WorkerEvent():
                self._worker(event)
            case Retry():
                note = " (partial output discarded)" if event.discard_partial else ""
                self._line(
                    self.err,
                    f"retry {event.attempt} in {event.delay:.1f}s after: {event.error}{note}",
                )
            case Compacted():
                self._line(
                    self.err,
                    f"compacted history: {event.messages_before} → {event.messages_after} messages",
                )
            case Done() if self.output_format == "text" and not self._live_text:
                self._line(self.out, event.text)
            case Incomplete():
                if self.output_format == "text" and not self._live_text and self._kept:
                    self._line(self.out, self._kept)
                self._line(self.err, incomplete_line(event))
            case Error():
                self._line(self.err, f"drover: error: {event.error}")
            case _:
                pass

    def _worker(self, wrapped: WorkerEvent) -> None:
        """A worker's tool calls show like direct ones, marked with the worker; its text
        does not (the parent gets its answer)."""
        tag = f"[worker {wrapped.worker}]"
        match wrapped.event:
            case ToolStart() as event:
                self._line(self.err, f"→ {tag} {event.input_summary}")
            case ToolDone() as event:
                mark = "✗" if event.is_error else "✓"
                self._line(self.err, f"  {mark} {tag} {event.name}: {event.output_summary}")
            case Done():
                self._line(self.err, f"  {tag} finished")
            case Incomplete() | Error() as event:
                self._line(self.err, f"  {tag} stopped ({event.reason}): {event.error}")
            case _:
                pass

    async def aclose(self) -> None:
        """Withdraw questions still waiting for an answer (the turn is over)."""
        for task in self._questions:
            task.cancel()
        for task in list(self._questions):
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _answer(self, request: PermissionRequest) -> None:
        if self.lines is None:
            self._line(
                self.err,
                f"denied {request.summary}: permission needed and no terminal to ask "
                "(use --permission-mode allow)",
            )
            request.decide("deny", reason=NO_TERMINAL_TEXT)
            return
        # The loop waits for the decision, not for send(): the question runs beside it.
        task = asyncio.get_running_loop().create_task(self._ask(request, self.lines))
        self._questions.add(task)
        task.add_done_callback(self._questions.discard)

    async def _ask(self, request: PermissionRequest, lines: StdinLines) -> None:
        async with self._asking:  # parallel calls are asked about one at a time
            if request.decision.done():
                return
            # The whole input, not the 100-character summary: nothing may be approved unseen.
            shown = json.dumps(dict(request.input), ensure_ascii=False, indent=2)
            self._write(
                self.err,
                visible(f"\n{request.tool_name} wants to run with:\n{shown}\n", code=True)
                + f"Allow? [y]es / [a]lways for {always_scope(request.tool_name)} / [N]o: ",
            )
            reader = asyncio.get_running_loop().create_task(lines.readline())
            answered = False
            try:
                await asyncio.wait((reader, request.decision), return_when=asyncio.FIRST_COMPLETED)
                if reader.done() and not request.decision.done():
                    line = reader.result()
                    answered = request.decide("deny" if line is None else _decision(line))
            finally:
                if not answered:
                    # The turn ended first: a line read meanwhile belongs to whoever reads next.
                    reader.cancel()
                    if reader.done() and not reader.cancelled():
                        line = reader.result()
                        if line is not None:
                            lines.push_back(line)
                    self._write(self.err, "\n")

    def _line(self, stream: TextIO, text: str) -> None:
        self._write(stream, text + "\n")

    def _write(self, stream: TextIO, text: str) -> None:
        if id(stream) in self._closed:
            return
        if stream is self.err or (stream is self.out and self._live_text):
            text = visible(text)
        if not write(stream, text):
            self._closed.add(id(stream))
