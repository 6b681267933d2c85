"""``drover -p PROMPT``: one turn, printed, with an exit status that says how it ended.

Ctrl-C (SIGINT) or SIGTERM interrupts the turn: the loop records what it had done (the partial
message, tool outputs, calls cut off) and why (the user, or SIGTERM), the journal keeps it as
pending work, and the process exits 130. A later ``-p`` on the same ``--session`` — or
``--resume-turn`` with no prompt — continues from there, and says on stderr that it sends that
work before the new prompt.
``--discard-pending`` drops the work instead (alone, it only drops it): the way out when the
API refuses the request as such, which the end of such a turn says.

A reader of stdout that goes away does not stop the turn: it runs to its end, is journaled,
and the exit status still says how it ended.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from typing import Any

from drover.agent.images import prompt_with_images
from drover.agent.session import Session
from drover.cli.build import cli_agent
from drover.cli.render import HeadlessPrinter, pending_note, write
from drover.cli.session_ids import resolve_session
from drover.cli.stdin import StdinLines, stdin_is_terminal
from drover.config.workdir import resolve_workdir
from drover.core.events import (
    Done,
    Error,
    Event,
    Incomplete,
    TerminalEvent,
    TurnStarted,
    turn_status,
)
from drover.core.messages import Message, Prompt, Usage
from drover.errors import ConfigError
from drover.store import open_store

EXIT_CODES = {"completed": 0, "failed": 1, "incomplete": 3, "interrupted": 130}
#: The recorded error of a turn stopped by SIGTERM (not the user's Ctrl-C).
SIGTERM_TEXT = "interrupted: drover received SIGTERM (a timeout or a service stopping it)"


class _Terminal:
    """Remembers the terminal event of the turn, whatever path ended it."""

    def __init__(self) -> None:
        self.event: TerminalEvent | None = None
        self.turn_id = ""

    async def send(self, event: Event) -> None:
        if isinstance(event, TurnStarted):
            self.turn_id = event.turn_id
        elif isinstance(event, Done | Incomplete | Error):
            self.event = event


def read_stdin_prompt() -> str:
    """The prompt piped in, decoded strictly: a wrong byte fails here, before anything is
    created, rather than later in the journal."""
    data = sys.stdin.buffer.read() if sys.stdin is not None else b""
    try:
        return data.decode("utf-8").strip()
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"standard input is not valid UTF-8 (byte {data[exc.start]:#04x} at offset {exc.start})"
        ) from None


def headless_prompt(args: argparse.Namespace) -> str | None:
    """The new instruction, or None (resume the unfinished turn / only discard).

    Called before the event loop starts: a Ctrl-C while stdin is read then interrupts at once
    (inside the loop, a blocking read would only see the cancellation once it returned)."""
    if args.resume_turn:
        return None
    prompt: str = args.prompt or ""
    if not prompt and not stdin_is_terminal():
        prompt = read_stdin_prompt()
    if prompt:
        return prompt
    if args.discard_pending:
        return None
    raise ConfigError("no prompt: give one after -p or on standard input")


async def run_headless(args: argparse.Namespace, text: str | None) -> int:
    prompt: Prompt | None = text
    if text is not None:
        # Images are read (and refused) before anything is opened or created.
        prompt = prompt_with_images(text, resolve_workdir(args.workdir), args.image)
    elif args.image:
        raise ConfigError("--image goes with a prompt (after -p or on standard input)")
    named = await _named_session(args, may_create=prompt is not None)
    async with cli_agent(args) as agent:
        if agent.sandbox is not None and agent.sandbox.unavailable:
            _note(f"drover: warning: {agent.sandbox.describe()}")
        session = await agent.session(
            named, continue_latest=args.continue_, must_exist=prompt is None
        )
        if session.created:
            _note(f"new session {session.id} (continue it with --session {session.id})")
        if args.discard_pending:
            dropped = await session.discard() if session.pending else 0
            if prompt is None:
                _report_discarded(args.output_format, session.id, dropped)
                return 0
        note = None
        if prompt is not None and args.output_format == "text":
            note = pending_note(len(session.pending), "--discard-pending")
        return await _run_turn(session, prompt, args, note)


async def _named_session(args: argparse.Namespace, *, may_create: bool) -> str | None:
    """The stored session ``--session`` names (None: none given), found on a journal opened
    for this alone before the agent is built: an id that names no session fails at once,
    without the provider's SDK imported (about a second)."""
    if args.session is None:
        return None
    async with open_store(args.db or os.environ.get("DROVER_DB")) as store:
        return await resolve_session(store, args.session, may_create=may_create)


async def _run_turn(
    session: Session,
    prompt: Prompt | None,
    args: argparse.Namespace,
    note: str | None = None,
) -> int:
    ask = stdin_is_terminal() and args.permission_mode in ("ask", "sandboxed")
    printer = HeadlessPrinter(
        output_format=args.output_format, lines=StdinLines() if ask else None, preamble=note
    )
    terminal = _Terminal()
    session_id = session.id
    try:
        running = session.start(prompt, live=[terminal, printer])
    except BaseException:
        await printer.aclose()
        raise
    loop = asyncio.get_running_loop()
    # Ctrl-C is the user's; SIGTERM comes from whoever stops the process (a `timeout`, a
    # service manager), and the turn records that instead.
    loop.add_signal_handler(signal.SIGINT, running.interrupt)
    loop.add_signal_handler(signal.SIGTERM, running.interrupt, SIGTERM_TEXT)
    try:
        await running.finished()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        await printer.aclose()
    assert running.task is not None
    if not running.task.cancelled() and running.task.exception() is not None:
        raise running.task.exception()  # type: ignore[misc]

    event = terminal.event
    status = turn_status(event) if event else "interrupted"
    if args.output_format != "text":
        result: dict[str, Any] = {
            "type": "result",
            "session_id": session_id,
            "turn_id": terminal.turn_id,
            "status": status,
            "text": _answer_text(event, session.pending),
            "usage": (event.usage if event else Usage()).to_dict(),
        }
        if event is not None and not isinstance(event, Done):
            result["reason"] = event.reason
            result["error"] = event.error
            result["retryable"] = event.retryable
        result["pending_messages"] = len(session.pending)
        # (On a terminal as ASCII: JSON leaves C1 controls and bidi overrides as they are.)
        ascii_only = sys.stdout.isatty()
        write(sys.stdout, json.dumps(result, ensure_ascii=ascii_only) + "\n")
    if isinstance(event, Incomplete | Error) and not event.retryable:
        drop = (
            f"drop the unfinished work with --discard-pending --session {session_id}"
            if session.pending
            else "change the prompt"
        )
        _note(
            f"session {session_id}: resending will fail the same way (the request itself "
            f"was refused); {drop}, or use another --model"
        )
    elif status != "completed" and session.pending:
        _note(
            f"session {session_id}: turn {status}; its work is kept — run again with "
            f"--session {session_id} (or add --resume-turn) to resume"
        )
    return EXIT_CODES[status]


def _report_discarded(output_format: str, session_id: str, dropped: int) -> None:
    if output_format == "text":
        plural = "" if dropped == 1 else "s"
        text = f"discarded {dropped} pending message{plural} of session {session_id}"
    else:
        report = {"type": "discarded", "session_id": session_id, "discarded_messages": dropped}
        text = json.dumps(report)
    write(sys.stdout, text + "\n")


def _note(text: str) -> None:
    write(sys.stderr, text + "\n")


def _answer_text(event: TerminalEvent | None, pending: tuple[Message, ...]) -> str:
    if isinstance(event, Done):
        return event.text
    for message in reversed(pending):
        if message.role == "assistant" and message.text:
            return message.text
    return ""
