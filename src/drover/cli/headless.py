"""``drover -p PROMPT``: one turn, printed, with an exit status that says how it ended.

Ctrl-C (SIGINT) or SIGTERM interrupts the turn: the loop records what it had done (the partial
message, tool outputs, calls cut off), the journal keeps it as pending work, and the process
exits 130. A later ``-p`` on the same ``--session`` — or ``--resume-turn`` with no prompt —
continues from there.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
from typing import Any

from drover.cli.render import HeadlessPrinter
from drover.cli.runtime import RunOptions, Runtime, open_runtime
from drover.errors import ConfigError
from drover.events import (
    Done,
    Error,
    Event,
    Incomplete,
    TerminalEvent,
    TurnStarted,
    turn_status,
)
from drover.messages import Message, Usage

EXIT_CODES = {"completed": 0, "failed": 1, "incomplete": 3, "interrupted": 130}


def run_options(args: argparse.Namespace) -> RunOptions:
    return RunOptions(
        model=args.model,
        base_url=args.base_url,
        db=args.db,
        workdir=args.workdir,
        permission_mode=args.permission_mode,
        max_turns=args.max_turns,
        sandbox=args.sandbox,
        sandbox_network=args.sandbox_network,
    )


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


async def run_headless(args: argparse.Namespace) -> int:
    if args.resume_turn:
        if args.prompt:
            raise ConfigError("--resume-turn takes no prompt: it finishes the unfinished turn")
        args.prompt = None
    elif not args.prompt:
        args.prompt = "" if sys.stdin.isatty() else sys.stdin.read().strip()
        if not args.prompt:
            raise ConfigError("no prompt: give one after -p or on standard input")
    if args.session and args.continue_:
        raise ConfigError("use either --session or --continue, not both")
    async with open_runtime(run_options(args)) as runtime:
        if runtime.sandbox.unavailable:
            print(f"drover: warning: {runtime.sandbox.describe()}", file=sys.stderr)
        return await _run_turn(runtime, args)


async def _run_turn(runtime: Runtime, args: argparse.Namespace) -> int:
    record, session = await runtime.session(session_id=args.session, continue_latest=args.continue_)
    printer = HeadlessPrinter(
        output_format=args.output_format,
        interactive=sys.stdin.isatty() and args.permission_mode in ("ask", "sandboxed"),
    )
    terminal = _Terminal()
    turn = asyncio.get_running_loop().create_task(
        runtime.runner.run(session, args.prompt, [terminal, printer])
    )
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, turn.cancel)
    try:
        with contextlib.suppress(asyncio.CancelledError):
            await turn
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)

    event = terminal.event
    status = turn_status(event) if event else "interrupted"
    if args.output_format != "text":
        result: dict[str, Any] = {
            "type": "result",
            "session_id": record.id,
            "turn_id": terminal.turn_id,
            "status": status,
            "text": _answer_text(event, session.pending),
            "usage": (event.usage if event else Usage()).to_dict(),
        }
        if event is not None and not isinstance(event, Done):
            result["reason"] = event.reason
            result["error"] = event.error
        result["pending_messages"] = len(session.pending)
        print(json.dumps(result, ensure_ascii=False), flush=True)
    if status in ("incomplete", "interrupted") and session.pending:
        print(
            f"session {record.id}: turn {status}; its work is kept — run again with "
            f"--session {record.id} (or add --resume-turn) to resume",
            file=sys.stderr,
        )
    return EXIT_CODES[status]


def _answer_text(event: TerminalEvent | None, pending: tuple[Message, ...]) -> str:
    if isinstance(event, Done):
        return event.text
    for message in reversed(pending):
        if message.role == "assistant" and message.text:
            return message.text
    return ""
