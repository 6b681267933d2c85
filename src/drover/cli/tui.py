"""Rendering of a turn on an interactive terminal with rich: the REPL's event sink.

:class:`TurnView` turns the loop's events into two kinds of output. What is final is printed
once, above the live area, and scrolls away like ordinary terminal output: markdown paragraphs
as soon as they are complete, one row per tool call once it reached its final state, notes on
retries and on the end of the turn. What still changes lives in the live area at the bottom
(the view is its renderable): the paragraph being written, one spinner per tool call still in
flight (matched by call index within the response), the permission question
being asked, and the status line.

Permission requests queue here and are asked one at a time, whatever order parallel calls ask
in; the whole input is printed first (as a diff for ``edit_file``, and for ``write_file`` on a
file that exists), wrapped, never cut, so nothing is approved unseen. Keys reach
:meth:`TurnView.answer` from the REPL, which owns the keyboard.

Everything shown here that the model, a tool or a server wrote — answers, inputs, diffs,
summaries, progress, errors — goes through :func:`~drover.core.visible.visible` first: a terminal
escape, a carriage return or a right-to-left override in a command is shown, never obeyed, so
the question always shows what would run.
"""

from __future__ import annotations

import difflib
import json
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, assert_never

from rich.console import Console, Group, RenderableType
from rich.markdown import Markdown
from rich.spinner import Spinner
from rich.syntax import Syntax
from rich.text import Text

from drover.core.events import (
    TERMINAL_TOOL_STATES,
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
    StepStarted,
    TextDelta,
    ThinkingDelta,
    ToolDone,
    ToolProgress,
    ToolResults,
    ToolStart,
    ToolState,
    ToolStateChanged,
    TurnStarted,
    UsageReport,
    WorkerEvent,
)
from drover.core.messages import Message, Usage
from drover.core.rules import always_scope
from drover.core.summaries import summarise_input, summarise_output
from drover.core.visible import visible

#: Lines of a file shown for a new ``write_file``; the rest is counted, not shown.
PREVIEW_LINES = 40

#: Final row marks and labels, per final state of a tool call.
FINAL_LABELS: dict[str, tuple[str, str, str]] = {
    "output-available": ("✓", "done", "green"),
    "output-error": ("✗", "error", "red"),
    "denied": ("⊘", "denied", "yellow"),
    "interrupted": ("■", "interrupted", "yellow"),
    "unknown": ("?", "interrupted, outcome unknown", "magenta"),
}
WAITING_LABELS: dict[ToolState, str] = {
    "input-streaming": "writing input",
    "input-available": "ready",
    "awaiting-permission": "waiting for your answer",
    "running": "running",
}


@dataclass(slots=True)
class ToolRow:
    call_id: str
    index: int
    name: str
    state: ToolState = "input-streaming"
    summary: str = ""
    output_summary: str = ""
    outcome_unknown: bool = False
    #: Where a command ran (``bash``): the sandbox label of its ``tool_start``.
    sandbox: str | None = None
    #: The latest progress a running call reported (``3/5 indexing``), shown by its spinner.
    progress: str = ""
    printed: bool = False

    @property
    def final(self) -> bool:
        return self.state in TERMINAL_TOOL_STATES


def tool_row_text(row: ToolRow) -> Text:
    """The one-line final row of a tool call: mark, input summary, state, output summary."""
    key = "unknown" if row.outcome_unknown else row.state
    mark, label, style = FINAL_LABELS.get(key, ("·", row.state, "dim"))
    text = Text(no_wrap=False)
    text.append(f"{mark} ", style=style)
    text.append(row.summary or row.name, style="bold")
    text.append(f"  [{label}]", style=style)
    if row.sandbox:
        text.append(f" (sandbox {row.sandbox})", style="dim")
    if row.output_summary:
        text.append(f"  {row.output_summary}", style="dim")
    return text


def progress_label(event: ToolProgress) -> str:
    """``3/5 message`` (or ``3 message`` without a total) of a progress report."""
    done = f"{event.progress:g}" + (f"/{event.total:g}" if event.total is not None else "")
    return f"{done} {visible(event.message)}" if event.message else done


def split_markdown(text: str) -> tuple[str, str]:
    """``(complete, rest)``: complete paragraphs that can be rendered for good, and the tail
    still being written. Never cuts inside a fenced code block."""
    cut = 0
    fences = 0
    position = 0
    for line in text.splitlines(keepends=True):
        position += len(line)
        stripped = line.strip()
        if stripped.startswith(("```", "~~~")):
            fences += 1
        elif not stripped and fences % 2 == 0 and line.endswith("\n"):
            cut = position
    return text[:cut], text[cut:]


def _inside(workdir: Path, path: str) -> Path | None:
    """The file a model's path names, or None when it leaves the working directory."""
    try:
        resolved = (workdir / path).resolve()
    except (OSError, RuntimeError, ValueError):
        return None
    return resolved if resolved.is_relative_to(workdir) else None


def _read_text(path: Path | None) -> str | None:
    if path is None or not path.is_file():
        return None
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _diff(before: str, after: str, name: str) -> str:
    lines = difflib.unified_diff(
        before.splitlines(keepends=True),
        after.splitlines(keepends=True),
        fromfile=f"a/{name}",
        tofile=f"b/{name}",
    )
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def permission_details(tool: str, input: Mapping[str, Any], workdir: Path) -> RenderableType:
    """What a permission question shows of the call: a diff for file edits, else the input."""
    path = input.get("path")
    if isinstance(path, str) and tool in ("edit_file", "write_file"):
        current = _read_text(_inside(workdir, path))
        if tool == "edit_file":
            old, new = str(input.get("old_string", "")), str(input.get("new_string", ""))
            if current is not None and old and old in current:
                after = current.replace(old, new, 1)
                return _code(_diff(current, after, path), "diff")
            return _code(_diff(old, new, path), "diff")
        content = str(input.get("content", ""))
        if current is not None:
            return _code(_diff(current, content, path), "diff")
        lines = content.splitlines()
        shown = "\n".join(lines[:PREVIEW_LINES])
        more = len(lines) - PREVIEW_LINES
        note = f"\n… {more} more lines" if more > 0 else ""
        return Text(visible(f"new file {path} ({len(lines)} lines):\n{shown}", code=True) + note)
    if tool == "bash" and isinstance(input.get("command"), str):
        return _code(str(input["command"]), "bash")
    return Text(visible(json.dumps(dict(input), ensure_ascii=False, indent=2), code=True))


def _code(text: str, lexer: str) -> Syntax:
    """``text`` highlighted, made visible and wrapped (a long line is never cut off)."""
    return Syntax(visible(text, code=True), lexer, word_wrap=True)


def describe_kept(pending: Sequence[Message]) -> str:
    """What the unfinished work holds, in a few words (``"kept …"``)."""
    if not pending:
        return "nothing was kept (the turn had not produced anything yet)"
    chars = sum(len(m.text) for m in pending if m.role == "assistant")
    calls = sum(len(m.tool_uses) for m in pending)
    results = sum(len(m.tool_results) for m in pending)
    parts = [f"{len(pending)} message{'s' if len(pending) != 1 else ''}"]
    if chars:
        parts.append(f"{chars} characters of answer")
    if calls:
        parts.append(f"{calls} tool call{'s' if calls != 1 else ''} ({results} with results)")
    return "kept " + ", ".join(parts)


class TurnView:
    """The event sink of one turn in the interactive REPL (see the module docstring)."""

    def __init__(
        self,
        console: Console,
        workdir: Path,
        *,
        status: Callable[[], str] = lambda: "",
        on_usage: Callable[[Usage], None] = lambda usage: None,
    ) -> None:
        self.console = console
        self.workdir = workdir
        self.status = status
        self.on_usage = on_usage
        self.turn_id = ""
        self.rows: dict[str, ToolRow] = {}
        self._by_index: dict[int, str] = {}
        self._tail = ""
        self._thinking = 0
        self._questions: deque[PermissionRequest] = deque()
        self._asked: PermissionRequest | None = None
        self.ended: Done | Incomplete | Error | None = None

    # -- events --------------------------------------------------------------------------------

    async def send(self, event: Event) -> None:
        self.handle(event)

    def handle(self, event: Event) -> None:
        match event:
            case TurnStarted():
                self.turn_id = event.turn_id
            case StepStarted():
                self._by_index = {}
                self._thinking = 0
            case TextDelta():
                self._thinking = 0
                self._add_text(event.text)
            case ThinkingDelta():
                self._thinking += len(event.text)
            case Retry():
                self._retry(event)
            case AssistantMessage():
                self._flush_text()
                if event.partial:
                    self.console.print(Text("(the answer above was cut off here)", style="dim"))
            case ToolStateChanged():
                self._tool_state(event)
            case ToolStart():
                row = self._row_at(event.call_index)
                if row is not None:
                    row.summary = event.input_summary
                    row.sandbox = event.sandbox
            case ToolDone():
                row = self._row_at(event.call_index)
                if row is not None:
                    row.output_summary = event.output_summary
                    self._print_final(row)
            case ToolProgress():
                self._progress(event)
            case ToolResults():
                pass
            case HookRun():
                self._hook(event)
            case PermissionRequest():
                self._questions.append(event)
                self._next_question()
            case UsageReport() if not event.usage.partial:  # a partial one is counted at its end
                self.on_usage(event.usage)
            case UsageReport():
                pass
            case Compacted():
                self.console.print(
                    Text(
                        f"compacted the history: {event.messages_before} → "
                        f"{event.messages_after} messages",
                        style="dim",
                    )
                )
            case WorkerEvent():
                self._worker(event)
            case Done() | Incomplete() | Error():
                self._flush_text()
                self.ended = event
            case _:
                assert_never(event)

    def _hook(self, event: HookRun, tag: str = "") -> None:
        """A hook that did anything but pass is worth a line."""
        if event.outcome == "passed":
            return
        what = event.outcome.replace("_", " ")
        said = f": {event.message.strip().splitlines()[0]}" if event.message.strip() else ""
        style = "yellow" if event.outcome == "blocked" else "red"
        line = f"{tag}{event.point} hook ({event.hook}) {what} {event.name}{said}"
        self.console.print(Text(visible(line), style=style))

    def _worker(self, wrapped: WorkerEvent) -> None:
        """A worker of the ``task`` tool: its tool calls get spinners and rows like direct
        ones, marked with the worker; its text does not show (the parent gets its answer)."""
        tag = f"[worker {wrapped.worker}] "
        inner = wrapped.event
        match inner:
            case ToolStateChanged():
                self._tool_state(inner, key=f"{wrapped.call_id}/{wrapped.worker}/", tag=tag)
            case ToolStart():
                row = self.rows.get(f"{wrapped.call_id}/{wrapped.worker}/{inner.id}")
                if row is not None:
                    row.summary = tag + inner.input_summary
                    row.sandbox = inner.sandbox
            case ToolProgress():
                self._progress(inner, key=f"{wrapped.call_id}/{wrapped.worker}/")
            case HookRun():
                self._hook(inner, tag)
            case Done():
                self.console.print(Text(f"{tag}finished", style="dim"))
            case Incomplete() | Error():
                said = visible(f"{tag}stopped ({inner.reason}): {inner.error}")
                self.console.print(Text(said, style="yellow"))
            case _:
                pass

    # -- text ----------------------------------------------------------------------------------

    def _add_text(self, text: str) -> None:
        # The tail holds one paragraph at a time: complete ones are printed and dropped.
        self._tail += visible(text)
        complete, self._tail = split_markdown(self._tail)
        if complete.strip():
            self.console.print(Markdown(complete))

    def note(self, text: str) -> None:
        """Print ``text`` on its own line below the answer so far (the paragraph being
        written is printed first, so the note never lands in the middle of it)."""
        self._flush_text()
        self.console.print(Text(visible(text), style="yellow"))

    def _flush_text(self) -> None:
        tail, self._tail = self._tail, ""
        if tail.strip():
            self.console.print(Markdown(tail))

    def _retry(self, event: Retry) -> None:
        note = visible(f"retry {event.attempt} in {event.delay:.1f}s after: {event.error}")
        if event.discard_partial:
            self._tail = ""
            note += " — the answer restarts below"
        self.console.print(Text(note, style="yellow"))

    # -- tools ---------------------------------------------------------------------------------

    def _row_at(self, index: int) -> ToolRow | None:
        call_id = self._by_index.get(index)
        return self.rows.get(call_id) if call_id is not None else None

    def _tool_state(self, event: ToolStateChanged, *, key: str = "", tag: str = "") -> None:
        call_id = key + event.call_id
        row = self.rows.get(call_id)
        if row is None:
            self._flush_text()  # the text before a call belongs above its row
            name = tag + visible(event.name, code=True)  # (a model may call any name)
            row = ToolRow(call_id=call_id, index=event.call_index, name=name)
            self.rows[call_id] = row
        if not key:  # a worker's calls are matched by id, not by the parent's call index
            self._by_index[event.call_index] = call_id
        row.state = event.state
        if event.input is not None:
            row.summary = tag + summarise_input(event.name, event.input)
        if event.outcome_unknown:
            row.outcome_unknown = True
        if event.output is not None:
            row.output_summary = summarise_output(event.output)
        if row.final:
            self._print_final(row)

    def _progress(self, event: ToolProgress, *, key: str = "") -> None:
        row = self.rows.get(key + event.call_id)
        if row is not None and not row.final:
            row.progress = progress_label(event)

    def _print_final(self, row: ToolRow) -> None:
        if row.printed:
            return
        row.printed = True
        self.console.print(tool_row_text(row))

    def settle(self, states: Mapping[str, tuple[ToolState, bool, str | None]]) -> None:
        """After the turn: give every row the final state the journal recorded
        (``call_id → (state, outcome_unknown, output)``) and print the rows not yet printed.
        A row the journal does not know was cut off before it ran."""
        self._flush_text()
        for row in self.rows.values():
            known = states.get(row.call_id)
            if known is not None:
                row.state, unknown, output = known
                row.outcome_unknown = row.outcome_unknown or unknown
                if output is not None and not row.output_summary:
                    row.output_summary = summarise_output(output)
            if not row.final:
                row.state = "interrupted"
            self._print_final(row)

    # -- permission questions ------------------------------------------------------------------

    @property
    def question(self) -> PermissionRequest | None:
        """The request being asked, if any."""
        return self._asked

    def _next_question(self) -> None:
        if self._asked is not None and not self._asked.decision.done():
            return
        self._asked = None
        while self._questions:
            request = self._questions.popleft()
            if request.decision.done():
                continue
            # The details first: the live area (refreshed from another thread) shows the
            # question as soon as ``_asked`` is set, and it must never show before the diff.
            asking = visible(request.tool_name, code=True)
            self.console.print(Text(f"\n{asking} asks to run:", style="bold"))
            self.console.print(permission_details(request.tool_name, request.input, self.workdir))
            self._asked = request
            return

    def answer(self, decision: Decision) -> bool:
        """Answer the question being asked; True when there was one."""
        request = self._asked
        if request is None:
            return False
        request.decide(decision)
        always = f"allowed always ({always_scope(request.tool_name)})"
        label = {"allow": "allowed once", "always": always, "deny": "denied"}[decision]
        self.console.print(Text(f"{request.summary}: {label}", style="dim"))
        self._asked = None
        self._next_question()
        return True

    # -- the live area -------------------------------------------------------------------------

    def __rich__(self) -> RenderableType:
        parts: list[RenderableType] = []
        if self._thinking:
            parts.append(Text(f"thinking… ({self._thinking} characters)", style="dim italic"))
        if self._tail.strip():
            lines = self._tail.splitlines()
            room = max(self.console.height - 8, 3)
            if len(lines) > room:  # a long code block in progress: its last lines
                parts.append(Text("\n".join(lines[-room:])))
            else:
                parts.append(Markdown(self._tail))
        # One line per call whatever the width (read at each refresh: the terminal may have
        # been resized), so that the live area stays short.
        room = max(self.console.width - 3, 10)
        for row in self.rows.values():
            if not row.final:
                label = WAITING_LABELS.get(row.state, row.state)
                if row.progress and row.state == "running":
                    label = f"{label} {row.progress}"
                line = Text(f"({label}) {row.summary or row.name}")
                line.truncate(room, overflow="ellipsis")
                parts.append(Spinner("dots", line))
        if self._asked is not None and not self._asked.decision.done():
            ask = Text(f"Allow {self._asked.summary}?", style="bold cyan")
            ask.truncate(room + 2, overflow="ellipsis")
            parts.append(ask)
            scope = always_scope(self._asked.tool_name)
            keys = Text(f"y once · a always ({scope}) · n deny · Esc stops", style="bold")
            keys.truncate(room + 2, overflow="ellipsis")
            parts.append(keys)
        elif not parts:
            parts.append(Spinner("dots", Text("working…  (Esc interrupts)", style="dim")))
        status = self.status()
        if status:
            parts.append(Text(status, style="reverse", no_wrap=True, overflow="ellipsis"))
        return Group(*parts)
