"""The REPL's line mode, used when stdin or stdout is not a terminal (or ``TERM=dumb``).

Each line is a turn. Ctrl-C during a turn interrupts it (its work stays pending, and the next
line resumes it); Ctrl-C at the prompt or Ctrl-D leaves. The slash commands are the full
REPL's, and ``/help`` lists them as it does (:mod:`drover.cli.repl.commands`); the commands
both modes run alike live there.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from drover.agent.agent import Agent
from drover.agent.images import prompt_with_images
from drover.agent.session import Session
from drover.cli.build import cli_agent
from drover.cli.render import HeadlessPrinter, pending_note
from drover.cli.session_ids import resolve_session
from drover.cli.stdin import StdinLines, stdin_is_terminal
from drover.core.events import Error, Incomplete, turn_status
from drover.core.messages import Prompt
from drover.core.visible import visible
from drover.errors import ConfigError, DroverError


def _messages(count: int) -> str:
    return f"{count} message{'' if count == 1 else 's'}"


async def _read_line(lines: StdinLines, prompt: str) -> str | None:
    """The next line typed (None at the end of input); lines that are not UTF-8 are refused."""
    while True:
        sys.stdout.write(prompt)
        sys.stdout.flush()
        raw = await lines.readline()
        if raw is None:
            return None
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            print("that line is not valid UTF-8 text; it was ignored")


async def run_line_repl(args: argparse.Namespace) -> int:
    # The one reader of stdin: the prompt below and every permission question share it.
    lines = StdinLines()
    if stdin_is_terminal():
        from drover.cli.repl import ask_about_project_servers

        await ask_about_project_servers(args, lambda question: _read_line(lines, question))
    async with cli_agent(args) as agent:
        named = args.resume or args.session
        if named is not None:
            named = await resolve_session(agent.store, named, may_create=args.resume is None)
        session = await agent.session(
            named, continue_latest=args.continue_, must_exist=args.resume is not None
        )
        print(f"drover — session {session.id} in {agent.workdir} ({session.model})")
        if agent.sandbox is not None:
            print(agent.sandbox.describe())
        print("Type a request, /help for commands, Ctrl-D to leave.")
        if session.pending:
            print(f"This session has unfinished work ({_messages(len(session.pending))}): /resume")
        if args.initial_prompt:
            await _turn(session, args.initial_prompt, lines, images=args.image)
        while True:
            line = await _read_line(lines, "› ")
            if line is None:
                print()
                return 0
            line = line.strip()
            if not line:
                continue
            try:
                if line.startswith("/"):
                    opened = await _switch(line, agent, session)
                    managed = (
                        None if opened is not None else await _manage(line, agent, session, lines)
                    )
                    if opened is not None:
                        session = opened
                    elif isinstance(managed, Session):
                        session = managed
                    elif not managed and await _command(line, agent, session, lines):
                        return 0
                    continue
                note = pending_note(len(session.pending), "/discard", "message")
                await _turn(session, line, lines, note)
            except DroverError as exc:  # a busy session, a journal that failed: stay here
                print(visible(f"error: {exc}"))


async def _turn(
    session: Session,
    prompt: str | None,
    lines: StdinLines,
    note: str | None = None,
    images: Sequence[Path] = (),
) -> None:
    message: Prompt | None = prompt
    if prompt is not None:
        try:
            message = prompt_with_images(prompt, session.engine.workdir, images)
        except ConfigError as exc:
            print(f"error: {exc}; nothing was sent")
            return
    asks = lines if stdin_is_terminal() else None
    printer = HeadlessPrinter(output_format="text", lines=asks, preamble=note)
    loop = asyncio.get_running_loop()
    try:
        running = session.start(message, live=[printer])
        loop.add_signal_handler(signal.SIGINT, running.interrupt)
        try:
            await running.finished()
        finally:
            loop.remove_signal_handler(signal.SIGINT)
    finally:
        await printer.aclose()
    assert running.task is not None
    if running.task.cancelled() or running.end is None:
        if not running.task.cancelled() and running.task.exception() is not None:
            raise running.task.exception()  # type: ignore[misc]
        print("\n[interrupted: the work is kept; /resume or type a new message to continue]")
        return
    if turn_status(running.end) == "interrupted":
        print("\n[interrupted: the work is kept; /resume or type a new message to continue]")
        return
    outcome = running.task.result()
    event = outcome.event
    status = turn_status(event)
    if isinstance(event, Incomplete | Error) and not event.retryable:
        print(
            f"[{status}: resending will fail the same way (the request itself was refused); "
            "/discard drops the unfinished work, or /model switches to another model]"
        )
    elif status != "completed":
        print(f"[{status}: the work is kept; /resume or type a new message to continue]")


async def _manage(line: str, agent: Agent, session: Session, lines: StdinLines) -> bool | Session:
    """Run ``line`` when it is a session command (:mod:`drover.cli.repl.manage`,
    :mod:`drover.cli.repl.control`); whether it was one, or the session to go on in."""
    from drover.cli.repl import control, manage

    name, _, arg = line.partition(" ")
    arg = arg.strip()

    async def confirm(question: str) -> bool:
        answer = await _read_line(lines, question)
        return answer is not None and answer.strip().lower() in ("y", "yes")

    if name == "/rename":
        said = await manage.rename_command(agent, session, arg)
    elif name in ("/rm", "/delete"):
        said = await manage.remove_command(agent, session, arg, confirm)
    elif name == "/export":
        said = await manage.export_command(agent, session, arg)
    elif name == "/fork":
        said, forked = await control.fork_command(agent, session, arg)
        print(visible("\n".join(said)))
        return forked
    elif name == "/rewind":
        await control.rewind_command(agent, session, arg, confirm, _plain)
        return True
    else:
        return False
    print(visible("\n".join(said)))
    return True


def _plain(lines: list[tuple[str, str]]) -> None:
    for text, _ in lines:
        print(visible(text, code=True))


async def _switch(line: str, agent: Agent, session: Session) -> Session | None:
    """Run ``line`` when it opens another session (``/clear``, ``/resume ID``): that session
    (None: ``line`` is another command)."""
    name, _, arg = line.partition(" ")
    arg = arg.strip()
    if name == "/clear":
        opened = await agent.session()
        print(f"new session {opened.id} (the previous one stays stored: /sessions)")
        return opened
    if name != "/resume" or not arg:
        return None
    session_id = await resolve_session(agent.store, arg)
    if session_id == session.id:
        return None  # /resume on the open session: finish its turn (below)
    opened = await agent.session(session_id, must_exist=True)
    print(f"drover — session {opened.id} ({opened.model})")
    if opened.pending:
        print(f"This session has unfinished work ({_messages(len(opened.pending))}): /resume")
    return opened


async def _command(line: str, agent: Agent, session: Session, lines: StdinLines) -> bool:
    """Run a slash command; True means leave."""
    name, _, arg = line.partition(" ")
    arg = arg.strip()
    if name in ("/exit", "/quit"):
        return True
    if name == "/help":
        from drover.cli.repl.commands import HELP

        print(HELP)
    elif name == "/compact":
        from drover.cli.repl.commands import compact_command

        await compact_command(session, print)
    elif name == "/sessions":
        from drover.cli.repl.commands import sessions_lines

        print(visible("\n".join(await sessions_lines(agent, session.id))))
    elif name == "/tokens":
        convo = session.engine.convo
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
                visible(
                    f"  {message.role}: {text}{' calls: ' + calls if calls else ''}"
                    f"{f' ({results} results)' if results else ''}",
                    code=True,
                )
            )
    elif name == "/discard":
        count = await session.discard()
        print(
            f"discarded {count} pending message{'' if count == 1 else 's'} "
            "(the journal keeps them, marked discarded)"
        )
    elif name == "/resume":
        if not session.pending:
            print("nothing to resume")
        else:
            await _turn(session, None, lines)
    elif name == "/model":
        if not arg:
            print(f"model: {session.model}")
        else:
            try:
                await session.switch_model(arg)
            except DroverError as exc:
                print(f"error: {exc} (still using {session.model})")
            else:
                print(f"now using {arg}")
    elif name == "/permissions":
        from drover.cli.repl.commands import permissions_command

        for text in await permissions_command(session, arg):
            print(text)
    elif name == "/session":
        print(session.id)
    elif name == "/context":
        from drover.cli.repl.commands import context_command

        print("\n".join(context_command(agent, session)))
    else:
        print(f"unknown command {name}; /help lists them")
    return False
