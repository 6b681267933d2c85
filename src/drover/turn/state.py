"""A conversation as the library sees it: committed history, pending work, turns.

:class:`AgentSession` owns the conversation manager and the *pending work* of unfinished turns:
the messages of a turn that ended abnormally (its user message, assistant messages, tool calls,
tool outputs, partial text). Pending work is kept apart from the committed history — never in
both — and placed before the next user message; a turn that completes commits it.

Running a turn::

    session = AgentSession(provider=..., tools=default_registry(), workdir=Path("."))
    outcome = await session.run("fix the failing test", sink=EventRecorder())
    if session.pending:            # the turn did not complete; its work is kept
        await session.resume(sink) # finish it without a new instruction
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from drover.core.conversation import ConversationManager
from drover.core.events import Done, TerminalEvent, TurnStarted
from drover.core.messages import Message, Prompt, message_of_prompt, user_message
from drover.core.sinks import EventSink
from drover.errors import DroverError
from drover.providers.base import Provider
from drover.tools.registry import ToolRegistry
from drover.turn.hooks import Hooks
from drover.turn.loop import AgentLoop, LoopSettings, Prelude, TurnControl, TurnOptions, TurnWork
from drover.turn.permissions import PermissionPolicy

RESUME_NOTE = (
    "[Your previous response was cut off before it finished. Continue the task from where it "
    "stopped, without repeating work already done.]"
)


def last_assistant_text(messages: Sequence[Message]) -> str:
    """The last text an assistant message of ``messages`` holds ("" for none)."""
    return next((m.text for m in reversed(messages) if m.role == "assistant" and m.text), "")


def resume_message(pending: Sequence[Message]) -> Message | None:
    """The user message that continues ``pending`` work without a new instruction, if any.

    After tool results the model simply goes on; after an assistant message (a cut-off or
    paused response) it needs a user turn, which says plainly what happened.
    """
    if pending and pending[-1].role == "assistant":
        return user_message(RESUME_NOTE)
    return None


#: A session's last turn as the journal held it: id, status, discarded, rewound at.
JournalMark = tuple[str, str, bool, float | None]


@dataclass(frozen=True, slots=True)
class PreparedTurn:
    prefix: list[Message]
    user_message: Message | None


@dataclass(frozen=True, slots=True)
class TurnOutcome:
    turn_id: str
    event: TerminalEvent
    #: The messages the turn added (assistant messages, tool results, partial text).
    added: tuple[Message, ...]


class AgentSession:
    def __init__(
        self,
        *,
        provider: Provider,
        tools: ToolRegistry,
        workdir: Path,
        policy: PermissionPolicy | None = None,
        convo: ConversationManager | None = None,
        settings: LoopSettings | None = None,
        session_id: str | None = None,
        pending: Sequence[Message] = (),
        prelude: Prelude | None = None,
        hooks: Hooks | None = None,
    ) -> None:
        self.id = session_id or uuid.uuid4().hex
        self.provider = provider
        self.tools = tools
        self.workdir = workdir.resolve()
        self.policy = policy or PermissionPolicy()
        # An empty manager is falsy (its len is 0): test for None, or its settings are lost.
        self.convo = convo if convo is not None else ConversationManager()
        self.settings = settings or LoopSettings()
        self._pending: list[Message] = list(pending)
        #: Runs at the start of every turn (see :class:`~drover.turn.loop.AgentLoop`).
        self.prelude = prelude
        #: Commands run around tool calls and at a turn's end (:mod:`drover.turn.hooks`).
        self.hooks = hooks
        #: How the journal's last turn of the session looked when this view was made (the
        #: runner reloads the view when the journal moved on; None: unknown, reload).
        self.journal_mark: JournalMark | None = None

    # -- pending work --------------------------------------------------------------------------

    @property
    def pending(self) -> tuple[Message, ...]:
        """Messages of unfinished turns, waiting to be placed before the next user message."""
        return tuple(self._pending)

    def discard_pending(self) -> tuple[Message, ...]:
        """Drop the pending work (returns it)."""
        dropped, self._pending = tuple(self._pending), []
        return dropped

    def reload(self, committed: Sequence[Message], pending: Sequence[Message]) -> None:
        """Take the session as the journal holds it now."""
        self.convo.replace(committed)
        self._pending = list(pending)

    def history(self) -> tuple[Message, ...]:
        """Committed history followed by pending work: what the next request starts from."""
        return (*self.convo.messages(), *self._pending)

    # -- turns ---------------------------------------------------------------------------------

    def prepare(self, prompt: Prompt | None) -> PreparedTurn:
        """Lay out the next turn: pending work, then the user's message (or a resume note).

        ``prompt=None`` resumes the unfinished turn without a new instruction.
        """
        if prompt is None:
            if not self._pending:
                raise DroverError("nothing to resume: the last turn completed")
            message = resume_message(self._pending)
        else:
            message = message_of_prompt(prompt)
        prefix = [*self._pending, message] if message else list(self._pending)
        return PreparedTurn(prefix=prefix, user_message=message)

    async def run(
        self, prompt: Prompt, sink: EventSink, *, turn_id: str | None = None
    ) -> TurnOutcome:
        """Run a turn for a new user message (pending work goes before it)."""
        return await self.execute(self.prepare(prompt), sink, turn_id=turn_id)

    async def resume(self, sink: EventSink, *, turn_id: str | None = None) -> TurnOutcome:
        """Finish the unfinished turn without a new instruction."""
        return await self.execute(self.prepare(None), sink, turn_id=turn_id)

    def switch_provider(self, provider: Provider) -> None:
        """Use another model from the next turn on; pending work is kept and converted."""
        self.provider = provider

    async def execute(
        self,
        turn: PreparedTurn,
        sink: EventSink,
        *,
        turn_id: str | None = None,
        control: TurnControl | None = None,
        options: TurnOptions | None = None,
    ) -> TurnOutcome:
        """Run a prepared turn to its terminal event; cancellation interrupts it.

        ``control`` lets the caller stop the turn with a reason of its own (see
        :class:`~drover.turn.loop.TurnControl`); ``options`` are this turn's ``deps`` and output
        schema (see :class:`~drover.turn.loop.TurnOptions`).
        """
        turn_id = turn_id or uuid.uuid4().hex
        work = TurnWork.begin(turn.prefix)
        loop = AgentLoop(
            provider=self.provider,
            convo=self.convo,
            tools=self.tools,
            policy=self.policy,
            sink=sink,
            workdir=self.workdir,
            settings=self.settings,
            control=control,
            prelude=self.prelude,
            options=options,
            hooks=self.hooks,
        )
        started = TurnStarted(turn_id=turn_id, session_id=self.id, user_message=turn.user_message)
        try:
            event = await loop.run_turn(work, started)
        finally:
            # Runs on cancellation too: the loop has recorded the interrupted work by then.
            self._settle(work)
        if self.hooks:
            # After the end went out (the journal has it); an interruption kills the hook.
            text = event.text if isinstance(event, Done) else last_assistant_text(work.added)
            await self.hooks.turn_end(self.id, turn_id, event, text)
        return TurnOutcome(turn_id=turn_id, event=event, added=tuple(work.added))

    def _settle(self, work: TurnWork) -> None:
        if isinstance(work.outcome, Done):
            self.convo.extend(work.messages)
            self._pending = []
        else:
            self._pending = list(work.messages)
