"""Terminal consumers of turn events for headless mode.

Answer text goes to stdout; tool activity, retries and the turn's end go to stderr, so
``drover -p … > answer.txt`` captures only the answer. In ``stream-json`` mode every event is a
JSON line on stdout. Permission requests are answered here: on a terminal by asking the user,
otherwise by the ``--permission-mode`` already applied (a request that still arrives without a
terminal is denied, with a note).
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
from dataclasses import dataclass, field
from typing import Literal, TextIO, TypeAlias

from drover.events import (
    AssistantMessage,
    Compacted,
    Decision,
    Done,
    Error,
    Event,
    Incomplete,
    PermissionRequest,
    Retry,
    TextDelta,
    ToolDone,
    ToolStart,
    WorkerEvent,
    event_to_dict,
)

OutputFormat: TypeAlias = Literal["text", "json", "stream-json"]


def _ask_terminal(request: PermissionRequest) -> Decision:
    # The whole input, not the 100-character summary: nothing may be approved unseen.
    shown = json.dumps(dict(request.input), ensure_ascii=False, indent=2)
    sys.stderr.write(f"\n{request.tool_name} wants to run with:\n{shown}\n")
    sys.stderr.write("Allow? [y]es / [a]lways for this tool / [N]o: ")
    sys.stderr.flush()
    answer = sys.stdin.readline().strip().lower()
    if answer in ("a", "always"):
        return "always"
    if answer in ("y", "yes"):
        return "allow"
    return "deny"


@dataclass
class HeadlessPrinter:
    """An event sink that prints a turn for ``drover -p``."""

    output_format: OutputFormat
    interactive: bool
    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)
    _live_text: bool = False
    _mid_line: bool = False

    def __post_init__(self) -> None:
        # Live text only where a person watches; a pipe gets the final answer once.
        self._live_text = self.output_format == "text" and self.out.isatty()

    async def send(self, event: Event) -> None:
        if isinstance(event, PermissionRequest):
            self._answer(event)
        if self.output_format == "stream-json":
            self._line(self.out, json.dumps(event_to_dict(event), ensure_ascii=False))
            return
        match event:
            case TextDelta() if self._live_text:
                self.out.write(event.text)
                self.out.flush()
                self._mid_line = not event.text.endswith("\n")
            case AssistantMessage() if self._live_text and self._mid_line:
                self._line(self.out, "")
                self._mid_line = False
            case ToolStart():
                self._line(self.err, f"→ {event.input_summary}")
            case ToolDone():
                mark = "✗" if event.is_error else "✓"
                self._line(self.err, f"  {mark} {event.name}: {event.output_summary}")
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
                self._line(self.err, f"turn incomplete ({event.reason}): {event.error}")
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

    def _answer(self, request: PermissionRequest) -> None:
        if not self.interactive:
            self._line(
                self.err,
                f"denied {request.summary}: permission needed and no terminal to ask "
                "(use --permission-mode allow)",
            )
            request.decide("deny")
            return

        def prompt() -> None:
            decision = _ask_terminal(request)
            with contextlib.suppress(RuntimeError):  # the loop ended while the user thought
                request.decide(decision)

        # A daemon thread: a prompt left unanswered must not keep the process alive.
        threading.Thread(target=prompt, name="permission-prompt", daemon=True).start()

    @staticmethod
    def _line(stream: TextIO, text: str) -> None:
        stream.write(text + "\n")
        stream.flush()
