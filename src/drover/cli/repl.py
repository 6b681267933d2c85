"""``drover`` with no arguments: a line-based REPL over one session.

Each line is a turn. Ctrl-C during a turn interrupts it (its work stays pending, and the next
line resumes it); Ctrl-C at the prompt or Ctrl-D leaves. Slash commands:

/help, /tokens (estimate and calibration), /pending (the unfinished work), /resume (finish it
without a new instruction), /discard (drop it), /model PROVIDER:MODEL (switch; pending work is
converted), /session (its id), /exit.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import threading

from drover.cli.headless import run_options
from drover.cli.render import HeadlessPrinter
from drover.cli.runtime import Runtime, open_runtime
from drover.errors import DroverError
from drover.events import turn_status
from drover.providers.factory import create_provider
from drover.session import AgentSession

HELP = __doc__.split("Slash commands:", 1)[1].strip() if __doc__ else ""


async def _read_line(prompt: str) -> str | None:
    """Read a line without blocking the loop; a daemon thread never holds the exit."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[str | None] = loop.create_future()

    def read() -> None:
        try:
            line: str | None = input(prompt)
        except (EOFError, KeyboardInterrupt):
            line = None

        def deliver() -> None:
            if not future.done():
                future.set_result(line)

        loop.call_soon_threadsafe(deliver)

    threading.Thread(target=read, name="repl-input", daemon=True).start()
    return await future


async def run_repl(args: argparse.Namespace) -> int:
    async with open_runtime(run_options(args)) as runtime:
        record, session = await runtime.session(
            session_id=args.session, continue_latest=args.continue_
        )
        print(f"drover — session {record.id} in {runtime.workdir} ({runtime.model})")
        print(runtime.sandbox.describe())
        print("Type a request, /help for commands, Ctrl-D to leave.")
        if session.pending:
            print(f"This session has unfinished work ({len(session.pending)} messages): /resume")
        while True:
            line = await _read_line("› ")
            if line is None:
                print()
                return 0
            line = line.strip()
            if not line:
                continue
            if line.startswith("/"):
                if await _command(line, runtime, session):
                    return 0
                continue
            await _turn(runtime, session, line)


async def _turn(runtime: Runtime, session: AgentSession, prompt: str | None) -> None:
    printer = HeadlessPrinter(output_format="text", interactive=sys.stdin.isatty())
    task = asyncio.get_running_loop().create_task(runtime.runner.run(session, prompt, [printer]))
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, task.cancel)
    try:
        outcome = await task
        status = turn_status(outcome.event)
        if status != "completed":
            print(f"[{status}: the work is kept; /resume or type a new message to continue]")
    except asyncio.CancelledError:
        print("\n[interrupted: the work is kept; /resume or type a new message to continue]")
    except DroverError as exc:
        print(f"error: {exc}")
    finally:
        loop.remove_signal_handler(signal.SIGINT)


async def _command(line: str, runtime: Runtime, session: AgentSession) -> bool:
    """Run a slash command; True means leave."""
    name, _, arg = line.partition(" ")
    arg = arg.strip()
    if name in ("/exit", "/quit"):
        return True
    if name == "/help":
        print(HELP)
    elif name == "/tokens":
        convo = session.convo
        calibration = convo.calibration
        ratio = f"{calibration:.2f}" if calibration is not None else "not yet measured"
        print(
            f"estimated {convo.estimated_tokens(session.pending):,} tokens of "
            f"{convo.context_limit:,} (chars/token {convo.chars_per_token:g}; "
            f"API/estimate ratio {ratio}; calibrated {convo.calibrated_tokens(session.pending):,})"
        )
    elif name == "/pending":
        if not session.pending:
            print("no unfinished work")
        for message in session.pending:
            calls = ", ".join(c.name for c in message.tool_uses)
            results = len(message.tool_results)
            text = message.text[:60].replace("\n", " ")
            print(
                f"  {message.role}: {text}{' calls: ' + calls if calls else ''}"
                f"{f' ({results} results)' if results else ''}"
            )
    elif name == "/discard":
        count = len(session.pending)
        await runtime.runner.discard_pending(session)
        print(f"discarded {count} pending messages (the journal keeps them, marked discarded)")
    elif name == "/resume":
        if not session.pending:
            print("nothing to resume")
        else:
            await _turn(runtime, session, None)
    elif name == "/model":
        if not arg:
            print(f"model: {runtime.model}")
        else:
            try:
                provider = create_provider(arg, runtime.config)
            except DroverError as exc:
                print(f"error: {exc}")
            else:
                await session.provider.aclose()
                session.switch_provider(provider)
                runtime.provider, runtime.model = provider, arg
                print(f"now using {arg}")
    elif name == "/session":
        print(session.id)
    else:
        print(f"unknown command {name}; /help lists them")
    return False
