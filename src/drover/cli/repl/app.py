"""The interactive REPL on a terminal: prompt_toolkit for input, rich for output.

Between turns prompt_toolkit reads the message (history per user, multi-line editing with
Alt-Enter or a trailing backslash, Tab completion of slash commands and of paths under
the working directory, bracketed paste) with the status line at the bottom. During a turn
:class:`~drover.cli.repl.keys.TurnKeys` owns the keyboard and :class:`~drover.cli.tui.TurnView`
draws: Esc (or one Ctrl-C) interrupts the turn in any phase — the journal keeps what it did and
the next message resumes it — and a second Ctrl-C also leaves the REPL once the interrupted
turn is recorded. A line typed and entered during a turn is queued (``queued: …``, durably,
in the journal) and runs as the next turn once this one ends, however it ends; every other key
typed during a turn, or while it ends, goes to the next prompt in order. Ctrl-C at the
prompt clears it; twice leaves, as does Ctrl-D. Both readers share one input, which carries
the typed-ahead keys from one to the other.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from collections.abc import Sequence
from pathlib import Path

from platformdirs import user_data_path
from prompt_toolkit import PromptSession
from prompt_toolkit.history import FileHistory, History, InMemoryHistory
from prompt_toolkit.input import Input, create_input
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
from prompt_toolkit.output import Output, create_output
from rich.console import Console
from rich.live import Live
from rich.text import Text

from drover.agent.agent import Agent
from drover.agent.images import prompt_with_images
from drover.agent.session import Session
from drover.cli.repl.commands import run_command
from drover.cli.repl.complete import ReplCompleter
from drover.cli.repl.keys import TurnKeys
from drover.cli.repl.status import TokenAccount, load_prices, prices_path, status_text
from drover.cli.repl.transcript import print_transcript
from drover.cli.session_ids import resolve_session
from drover.cli.tui import TurnView, describe_kept
from drover.config.private import private_dir, private_file
from drover.core.events import Done, Error, Incomplete, ToolState
from drover.core.messages import Prompt, Usage
from drover.core.visible import visible
from drover.errors import ConfigError, DroverError
from drover.runtime.turns import RunningTurn

HISTORY_FILE = "repl_history"


def history_store() -> History:
    """The user's prompt history, kept across runs (in memory when it cannot be written)."""
    try:
        path = private_dir(user_data_path("drover")) / HISTORY_FILE
        private_file(path)  # (what the user typed is theirs alone)
        return FileHistory(str(path))
    except OSError:
        return InMemoryHistory()


def _key_bindings() -> KeyBindings:
    bindings = KeyBindings()

    @bindings.add("enter")
    @bindings.add("c-j")  # typed ahead before the prompt, the terminal turned Enter into \n
    def _submit(event: KeyPressEvent) -> None:
        buffer = event.current_buffer
        if buffer.document.text_before_cursor.endswith("\\"):
            buffer.delete_before_cursor(1)
            buffer.insert_text("\n")
        else:
            buffer.validate_and_handle()

    @bindings.add("escape", "enter")
    def _newline(event: KeyPressEvent) -> None:
        event.current_buffer.insert_text("\n")

    return bindings


class _TurnKeysHandler:
    """What the keys typed during one turn do; a key it does not use goes to the next prompt."""

    def __init__(self, view: TurnView, task: asyncio.Task[object]) -> None:
        self.view = view
        self.task = task
        self.phase: str | None = None
        self.quit = False

    def key(self, name: str) -> bool:
        """Act on one key; True when the turn used it."""
        if name in ("escape", "c-c"):
            if self.phase is not None and name == "c-c":
                self.quit = True
                self.view.note("leaving once the interrupted turn is recorded…")
            self.interrupt()
            return True
        if self.view.question is None:
            return False
        decision = {"y": "allow", "a": "always", "n": "deny"}.get(name.lower())
        if decision == "allow":
            self.view.answer("allow")
        elif decision == "always":
            self.view.answer("always")
        elif decision == "deny":
            self.view.answer("deny")
        return decision is not None

    def interrupt(self) -> None:
        if self.phase is not None or self.task.done():
            return
        if self.view.question is not None:
            self.phase = "a permission question"
        elif any(not row.final for row in self.view.rows.values()):
            self.phase = "a tool call"
        else:
            self.phase = "the model's answer"
        self.view.note(f"interrupting {self.phase}…")
        self.task.cancel()


class Repl:
    def __init__(
        self,
        agent: Agent,
        session: Session,
        console: Console,
        keyboard: Input | None = None,
        screen: Output | None = None,
    ) -> None:
        self.agent = agent
        self.session = session
        self.console = console
        # The one input of the prompt and of every turn's reader (the typeahead's key), and
        # the terminal output they set modes on.
        self.keyboard = keyboard or create_input()
        self.screen = screen or create_output()
        self.account = TokenAccount(prices=load_prices(prices_path()))
        # Where bash runs its commands: "workdir", "read-only+net", "off", "unavailable"…
        self.sandbox = agent.sandbox.label() if agent.sandbox is not None else "off"
        self._prompt: PromptSession[str] | None = None
        self._ctrl_c_armed = False
        # Lines typed during a turn on their way into the journal's queue.
        self._queueing: set[asyncio.Task[None]] = set()

    # -- status ---------------------------------------------------------------------------------

    def status(self) -> str:
        convo = self.session.engine.convo
        return status_text(
            model=self.session.model,
            account=self.account,
            context_used=convo.calibrated_tokens(self.session.pending),
            context_limit=convo.context_limit,
            session_id=self.session.id,
            sandbox=self.sandbox,
        )

    def reset_account(self) -> None:
        self.account = TokenAccount(prices=self.account.prices)

    def add_usage(self, usage: Usage) -> None:
        self.account.add(usage, self.session.model)

    async def show_session(self, *, transcript: bool) -> None:
        """The header of a session, with its transcript so far when it has one."""
        if transcript:
            used = await print_transcript(self.agent.store, self.session.id, self.console)
            self.account.used = self.account.used + used
        self.console.print(
            Text(f"drover — session {self.session.id} in {self.agent.workdir}", style="bold")
        )
        sandbox = self.agent.sandbox
        if sandbox is not None:
            style = "yellow" if sandbox.unavailable else "dim"
            self.console.print(Text(sandbox.describe(), style=style))
        pending = self.session.pending
        if pending:
            self.console.print(
                Text(
                    f"This session has unfinished work ({describe_kept(pending)}): the next "
                    "message resumes it; /resume continues without one, /discard drops it.",
                    style="yellow",
                )
            )

    # -- the loop -------------------------------------------------------------------------------

    async def run(self, first_prompt: str | None = None, images: Sequence[Path] = ()) -> int:
        self.console.print(
            Text("Type a request; /help lists commands; Esc interrupts a turn; Ctrl-D leaves.")
        )
        if first_prompt and await self.turn(first_prompt, echo=True, images=images):
            return 0
        while True:
            line = await self._read()
            if line is None:
                return 0
            if not line.strip():
                continue
            try:
                if line.startswith("/"):
                    if await run_command(self, line.strip()):
                        return 0
                    continue
                if await self.turn(line):
                    return 0
            except DroverError as exc:  # a busy session, a journal that failed: stay here
                self.console.print(Text(visible(f"error: {exc}"), style="red"))

    async def _read(self) -> str | None:
        if self._prompt is None:
            self._prompt = PromptSession(
                history=history_store(),
                completer=ReplCompleter(self.agent),
                complete_while_typing=False,
                multiline=True,
                key_bindings=_key_bindings(),
                prompt_continuation="  ",
                input=self.keyboard,
                output=self.screen,
            )
        while True:
            try:
                # The keys typed during the last turn are replayed first (typeahead).
                line = await self._prompt.prompt_async("› ", bottom_toolbar=self.status)
            except KeyboardInterrupt:
                if self._ctrl_c_armed:
                    return None
                self._ctrl_c_armed = True
                self.console.print(Text("(Ctrl-C again to leave; Ctrl-D also leaves)", style="dim"))
                continue
            except EOFError:
                return None
            self._ctrl_c_armed = False
            return line

    async def confirm(self, question: str) -> bool:
        """A yes/no question at the prompt (kept out of the prompt's history); Ctrl-C or
        Ctrl-D is no."""
        asker: PromptSession[str] = PromptSession(input=self.keyboard, output=self.screen)
        try:
            answer = await asker.prompt_async(question)
        except (KeyboardInterrupt, EOFError):
            return False
        return answer.strip().lower() in ("y", "yes")

    # -- one turn -------------------------------------------------------------------------------

    async def turn(
        self, prompt: str | None, *, echo: bool = False, images: Sequence[Path] = ()
    ) -> bool:
        """Run a turn (``None`` resumes the unfinished one); True when the user asked to leave.
        ``echo`` shows a prompt that was not typed at the prompt (the command line's); the
        prompt's ``@image.png`` words and ``images`` go with it."""
        if prompt is not None and echo:
            self.console.print(Text(f"› {prompt}", style="bold"))
        message: Prompt | None = prompt
        if prompt is not None:
            try:
                message = prompt_with_images(prompt, self.agent.workdir, images)
            except ConfigError as refused:
                self.console.print(Text(f"error: {refused}; nothing was sent", style="red"))
                return False
            if not isinstance(message, str):
                count = len(message.content) - (1 if message.text else 0)
                self.console.print(
                    Text(f"(with {count} image{'s' if count > 1 else ''})", style="dim")
                )
        if prompt is not None and self.session.pending:
            self.console.print(
                Text(
                    f"(the unfinished work goes before this message: "
                    f"{describe_kept(self.session.pending)})",
                    style="dim",
                )
            )
        view = self._view()
        quit = await self._watch(self.session.start(message, live=[view], follow=False), view)
        # Then the lines queued during it, each as a turn of its own, in order.
        while not quit:
            if self._queueing:
                await asyncio.wait(tuple(self._queueing))
            waiting = await self.session.queued()
            view = self._view()
            running = await self.session.start_queued(live=[view])
            if running is None:
                break
            if waiting and running.claim == waiting[0].id:
                self.console.print(Text(visible(f"› {waiting[0].content}"), style="bold"))
            quit = await self._watch(running, view)
        return quit

    def _view(self) -> TurnView:
        return TurnView(
            self.console, self.agent.workdir, status=self.status, on_usage=self.add_usage
        )

    def _queue(self, line: str) -> bool:
        """Queue a line entered during a turn (in the journal, so it also outlives this
        process); it runs when the turn ends."""
        self.console.print(Text(f"queued: {line}", style="cyan"))
        task = asyncio.get_running_loop().create_task(self._enqueue(line))
        self._queueing.add(task)
        task.add_done_callback(self._queueing.discard)
        return True

    async def _enqueue(self, line: str) -> None:
        try:
            await self.session.submit(line, if_busy="enqueue", follow=False)
        except DroverError as exc:
            said = visible(f"error: could not queue the line: {exc}")
            self.console.print(Text(said, style="red"))

    async def _watch(self, running: RunningTurn, view: TurnView) -> bool:
        """Show a started turn until it ends; True when the user asked to leave."""
        loop = asyncio.get_running_loop()
        task = running.task
        assert task is not None
        handler = _TurnKeysHandler(view, task)
        # The turn's reader keeps the keyboard until the end is reported, so that keys typed
        # while the turn ends are read in raw mode (no echo, no signal, Enter still Enter)
        # and handed to the prompt with the rest.
        keys = TurnKeys(handler.key, self.keyboard, self.screen, on_line=self._queue)
        with keys.attached():
            loop.add_signal_handler(signal.SIGINT, handler.interrupt)
            try:
                with Live(view, console=self.console, refresh_per_second=10, transient=True):
                    await asyncio.wait([task])
            finally:
                loop.remove_signal_handler(signal.SIGINT)
            view.settle(await self._journal_states(view.turn_id))
            if not task.cancelled() and task.exception() is not None:
                failure = task.exception()
                assert failure is not None
                raise failure
            self._report_end(view, handler)
        self._ctrl_c_armed = handler.quit
        return handler.quit

    async def _journal_states(self, turn_id: str) -> dict[str, tuple[ToolState, bool, str | None]]:
        if not turn_id:
            return {}
        calls = await self.agent.store.tool_calls(turn_id)
        return {c.call_id: (c.state, c.outcome_unknown, c.output) for c in calls}

    def _report_end(self, view: TurnView, handler: _TurnKeysHandler) -> None:
        pending = self.session.pending
        end = view.ended
        interrupted = not isinstance(end, Done) and (end is None or end.reason == "interrupted")
        if handler.phase is not None or interrupted:
            during = f" during {handler.phase}" if handler.phase else ""
            self.console.print(
                Text(
                    f"■ interrupted{during}; {describe_kept(pending)}. The next message resumes "
                    "it (/resume continues without one, /pending shows it, /discard drops it).",
                    style="yellow",
                )
            )
            return
        if isinstance(end, Done):
            return
        status = "incomplete" if isinstance(end, Incomplete) else "failed"
        assert isinstance(end, Incomplete | Error)
        line = f"turn {status} ({end.reason}): {end.error}"
        if not end.retryable:
            line += (
                ". Resending will fail the same way (the request itself was refused); "
                "/discard drops the unfinished work, or /model switches to another model"
            )
        elif pending:
            line += (
                f"; {describe_kept(pending)}. Type a message to continue "
                "with it, or /resume; /pending shows it"
            )
        else:
            line += ". Nothing was kept; send the message again"
        self.console.print(Text(visible(line), style="red" if status == "failed" else "yellow"))


async def ask_at_the_prompt(question: str) -> str | None:
    """One question on the terminal before the REPL starts (None: Ctrl-C or Ctrl-D)."""
    asker: PromptSession[str] = PromptSession()
    try:
        return await asker.prompt_async(question)
    except (KeyboardInterrupt, EOFError):
        return None


def make_console() -> Console:
    """Output for people: width and colour from the terminal, no colour under ``NO_COLOR``."""
    return Console(highlight=False)


async def run_interactive(args: argparse.Namespace, agent: Agent) -> int:
    named = args.resume or args.session
    if named is not None:
        named = await resolve_session(agent.store, named, may_create=args.resume is None)
    session = await agent.session(
        named, continue_latest=args.continue_, must_exist=args.resume is not None
    )
    repl = Repl(agent, session, make_console())
    await repl.show_session(transcript=not session.created)
    return await repl.run(args.initial_prompt, args.image)
