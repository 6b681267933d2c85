"""The library's entry point: :class:`Agent`, a durable, resumable tool-using agent.

An agent is a model, its tools, a system prompt and a journal. Every turn it runs goes through
the :class:`~drover.runner.Runner`, so the journal records it as it happens and a turn that
ends badly (API failure, turn limit, cancellation, a killed process) leaves its work pending in
the session, where the next ``run`` or :meth:`Agent.resume` picks it up::

    async with Agent("anthropic:claude-sonnet-4-5", tools=[word_count]) as agent:
        result = await agent.run("count the words of notes.txt")
        print(result.status, result.text)
        again = await agent.run("now the lines", session=result.session_id)

Resources (the store, the provider's HTTP client) are opened on first use and closed by
:meth:`Agent.aclose` (or the ``async with`` block). :meth:`Agent.run_sync` is the one-call form
for scripts: it opens, runs and closes inside its own event loop.

The agent sits just above the runner; the command line and the HTTP server build on the same
pieces (:func:`resolve_workdir`, :func:`default_system_prompt` live here for all of them).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from drover.channel import EventChannel
from drover.config import Config, load_config
from drover.convo import ConversationManager
from drover.errors import ConfigError, DroverError
from drover.events import (
    Decision,
    Done,
    Event,
    PermissionRequest,
    TerminalEvent,
    TurnStatus,
    is_terminal,
    turn_status,
)
from drover.loop import LoopSettings
from drover.messages import Message, Usage
from drover.permissions import PermissionMode, PermissionPolicy
from drover.providers.base import Provider
from drover.providers.factory import create_provider
from drover.runner import Runner
from drover.session import AgentSession
from drover.store import open_store
from drover.store.base import SessionRecord, Store
from drover.store.redact import Redactor
from drover.tools.base import Tool
from drover.tools.registry import ToolRegistry, default_registry
from drover.tools.sandbox import probe_sandbox, settings_from_config
from drover.workers import Coordinator, add_task_tool

log = logging.getLogger(__name__)

#: Decides a permission request: ``"allow"``, ``"always"`` or ``"deny"`` (sync or async).
PermissionCallback = Callable[[PermissionRequest], Decision | Awaitable[Decision]]


def resolve_workdir(path: Path | str | None) -> Path:
    """The working directory (default: the current one), checked and made absolute."""
    workdir = (Path(path) if path is not None else Path.cwd()).expanduser()
    if not workdir.is_dir():
        raise ConfigError(f"working directory does not exist or is not a directory: {workdir}")
    try:
        str(workdir).encode("utf-8")
    except UnicodeEncodeError:
        # The journal and the model see the path as text: it must be valid UTF-8.
        raise ConfigError(f"working directory path is not valid UTF-8: {workdir}") from None
    return workdir.resolve()


def default_system_prompt(workdir: Path) -> str:
    """The coding agent's system prompt (the command line's, and an agent's without one)."""
    return (
        "You are drover, a coding agent working in the directory "
        f"{workdir}. Use the tools to read, search, edit files and run commands there; paths "
        "are relative to that directory. Be concise. When a tool result says a call was "
        "interrupted, check the current state before repeating anything with side effects."
    )


def journal_files(db: str | None) -> list[str]:
    """The files of a SQLite journal given as a path (none for a URL or ``:memory:``): the
    sandbox hides them from ``bash``. The default journal lies in drover's data directory,
    which the sandbox hides anyway."""
    if not db or "://" in db or db.strip() == ":memory:":
        return []
    path = Path(db).expanduser().resolve()
    return [str(path)] + [f"{path}{suffix}" for suffix in ("-wal", "-shm", "-journal")]


async def open_agent_session(
    runner: Runner,
    record: SessionRecord,
    *,
    provider: Provider,
    tools: ToolRegistry,
    workdir: Path,
    policy: PermissionPolicy,
    settings: LoopSettings,
    config: Config,
    system_prompt: str,
    coordinator: Coordinator | None,
) -> AgentSession:
    """A stored session made ready to run turns: its history loaded, its conversation manager
    set up from the config, and the ``task`` tool's workers resumed at each turn's start."""
    session = await runner.agent_session(
        record,
        provider=provider,
        tools=tools,
        workdir=workdir,
        policy=policy,
        settings=settings,
        convo=ConversationManager(
            context_limit=config.context_limit,
            chars_per_token=config.chars_per_token,
            system_prompt=system_prompt,
        ),
    )
    if coordinator is not None:
        session.prelude = coordinator.resume
    return session


@dataclass(frozen=True, slots=True, kw_only=True)
class RunResult:
    """How a turn ended and what it left."""

    session_id: str
    turn_id: str
    status: TurnStatus
    #: The final answer; for a turn that did not complete, the last text it produced.
    text: str
    usage: Usage
    #: Work of unfinished turns kept for the next run (empty once a turn completes).
    pending: tuple[Message, ...]
    #: Why a turn that did not complete ended (``error``, ``max_turns``, ``interrupted``…).
    reason: str | None = None
    error: str | None = None
    #: For a turn that did not complete: whether sending the same request again may succeed.
    retryable: bool = True

    @property
    def completed(self) -> bool:
        return self.status == "completed"


def result_of(session: AgentSession, turn_id: str, event: TerminalEvent) -> RunResult:
    """The :class:`RunResult` of a turn of ``session`` that ended with ``event``."""
    pending = session.pending
    if isinstance(event, Done):
        return RunResult(
            session_id=session.id,
            turn_id=turn_id,
            status="completed",
            text=event.text,
            usage=event.usage,
            pending=pending,
        )
    text = next((m.text for m in reversed(pending) if m.role == "assistant" and m.text), "")
    return RunResult(
        session_id=session.id,
        turn_id=turn_id,
        status=turn_status(event),
        text=text,
        usage=event.usage,
        pending=pending,
        reason=event.reason,
        error=event.error,
        retryable=event.retryable,
    )


class _Permissions:
    """The live sink that answers permission requests through the agent's callback.

    Each request is answered in a task of its own, so a slow callback (a human) does not hold
    up the other events of the turn. Without a callback, a request is denied: nobody is there
    to allow it. A callback that fails denies too.
    """

    def __init__(self, callback: PermissionCallback | None, *, deny_unanswered: bool) -> None:
        self._callback = callback
        self._deny_unanswered = deny_unanswered
        self._tasks: set[asyncio.Task[None]] = set()

    async def send(self, event: Event) -> None:
        if not isinstance(event, PermissionRequest):
            return
        if self._callback is None:
            if self._deny_unanswered:
                event.decide("deny")
            return
        task = asyncio.get_running_loop().create_task(self._answer(self._callback, event))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answer(self, callback: PermissionCallback, request: PermissionRequest) -> None:
        decision: Decision = "deny"
        try:
            answer = callback(request)
            if inspect.isawaitable(answer):
                answer = await answer
            if answer in ("allow", "always", "deny"):
                decision = answer
            else:
                log.warning("permission callback returned %r; denying", answer)
        except Exception:
            log.exception("permission callback failed; denying %s", request.tool_name)
        request.decide(decision)

    async def aclose(self) -> None:
        for task in tuple(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks)


@dataclass(slots=True)
class _Open:
    """What an open agent holds."""

    store: Store
    owns_store: bool
    provider: Provider
    owns_provider: bool
    runner: Runner
    tools: ToolRegistry
    coordinator: Coordinator | None
    config: Config
    workdir: Path
    loop: asyncio.AbstractEventLoop
    sessions: dict[str, AgentSession]
    #: Turns of ``run_stream`` still running, and whether their terminal event was emitted.
    streams: dict[asyncio.Task[None], bool]


class Agent:
    """A model with tools, a system prompt and a journal; see the module docstring.

    ``model`` is a ``PROVIDER:MODEL`` spec (``anthropic:…``, ``openai:…`` for Chat Completions
    and compatible servers, ``openai-responses:…``; None: the config's default) or a
    :class:`~drover.providers.base.Provider` — e.g. drover's scripted fake,
    :class:`drover.testing.scripted.ScriptedProvider`. ``tools`` are the tools offered (None:
    the built-in coding tools and the ``task`` tool, as on the command line). ``store`` is a
    path, ``":memory:"``, a ``postgresql://`` URL or an open :class:`~drover.store.base.Store`
    (None: ``DROVER_DB``, else the SQLite journal in the user data directory). Side-effecting
    tools ask ``on_permission`` in ``permission_mode="ask"``; without a callback they are
    denied.
    """

    def __init__(
        self,
        model: str | Provider | None = None,
        *,
        tools: Iterable[Tool] | None = None,
        system_prompt: str | None = None,
        store: str | Store | None = None,
        workdir: Path | str | None = None,
        permission_mode: PermissionMode = "ask",
        on_permission: PermissionCallback | None = None,
        max_turns: int | None = None,
        base_url: str | None = None,
        config: Config | None = None,
    ) -> None:
        self._config = config
        self._model = model
        self._tools = None if tools is None else list(tools)
        self._system_prompt = system_prompt
        self._store = store
        self._workdir_arg = workdir
        self.policy = PermissionPolicy(permission_mode)
        self.on_permission = on_permission
        self._max_turns = max_turns
        self._base_url = base_url
        self._open: _Open | None = None
        #: Serialises opening, per event loop (a lock belongs to one loop).
        self._opening: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None

    # -- resources -------------------------------------------------------------------------------

    async def __aenter__(self) -> Agent:
        await self._resources()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the store and the provider the agent opened (not those it was given)."""
        opened, self._open = self._open, None
        if opened is None:
            return
        # A stream its reader left without closing it (``break``, ``return``) is finished
        # first: a turn past its end records it, one before its end is interrupted.
        for task, ended in tuple(opened.streams.items()):
            if not ended:
                task.cancel()
        if opened.streams:
            await asyncio.wait(tuple(opened.streams))
        try:
            if opened.owns_provider:
                await opened.provider.aclose()
        finally:
            if opened.owns_store:
                await opened.store.close()

    @property
    def store(self) -> Store:
        """The journal (the agent must be open: after a run or inside ``async with``)."""
        if self._open is None:
            raise DroverError("the agent is not open: use `async with agent` or run it first")
        return self._open.store

    async def _resources(self) -> _Open:
        loop = asyncio.get_running_loop()
        if self._opening is None or self._opening[0] is not loop:
            self._opening = (loop, asyncio.Lock())
        async with self._opening[1]:
            if self._open is not None:
                if self._open.loop is not loop:
                    raise DroverError("an agent is used from one event loop at a time")
                return self._open
            self._open = await self._build()
            return self._open

    async def _build(self) -> _Open:
        config = self._config or load_config()
        workdir = resolve_workdir(self._workdir_arg)
        async with contextlib.AsyncExitStack() as stack:
            db: str | None = None
            if isinstance(self._store, str | None):
                db = self._store or os.environ.get("DROVER_DB")
                store = open_store(db)
                stack.push_async_callback(store.close)
                await store.open()
                owns_store = True
            else:
                store, owns_store = self._store, False
            if isinstance(self._model, str | None):
                spec = self._model or config.default_model
                provider = create_provider(spec, config, base_url=self._base_url)
                stack.push_async_callback(provider.aclose)
                owns_provider = True
            else:
                provider, owns_provider = self._model, False
            runner = Runner(store, redactor=Redactor(config.redact_patterns))
            await runner.recover()
            coordinator = None
            if self._tools is None:
                settings = settings_from_config(config, hidden=journal_files(db), base=workdir)
                sandbox = await asyncio.to_thread(probe_sandbox, settings)
                tools = default_registry(sandbox=sandbox)
                coordinator = Coordinator(store)
                add_task_tool(tools, coordinator)
            else:
                tools = ToolRegistry(self._tools)
            stack.pop_all()
        return _Open(
            store=store,
            owns_store=owns_store,
            provider=provider,
            owns_provider=owns_provider,
            runner=runner,
            tools=tools,
            coordinator=coordinator,
            config=config,
            workdir=workdir,
            loop=asyncio.get_running_loop(),
            sessions={},
            streams={},
        )

    async def session(self, session: str | None = None) -> AgentSession:
        """The session with id ``session`` (created when new), or a new one (None)."""
        opened = await self._resources()
        if session is not None and session in opened.sessions:
            return opened.sessions[session]
        config, workdir = opened.config, opened.workdir
        model = self._model if isinstance(self._model, str) else opened.provider.model
        record = await opened.runner.open_session(
            workdir=workdir, model=model or config.default_model, session_id=session
        )
        prompt = self._system_prompt
        agent_session = await open_agent_session(
            opened.runner,
            record,
            provider=opened.provider,
            tools=opened.tools,
            workdir=workdir,
            policy=self.policy,
            settings=LoopSettings(max_turns=self._max_turns or config.max_turns),
            config=config,
            system_prompt=default_system_prompt(workdir) if prompt is None else prompt,
            coordinator=opened.coordinator,
        )
        opened.sessions[record.id] = agent_session
        return agent_session

    # -- turns -----------------------------------------------------------------------------------

    async def run(self, prompt: str, *, session: str | None = None) -> RunResult:
        """Run one turn for ``prompt`` in ``session`` (None: a new session).

        Pending work of the session goes before the prompt. Cancelling the call interrupts
        the turn; its work stays pending in the journal.
        """
        return await self._run(prompt, session)

    async def resume(self, session: str) -> RunResult:
        """Finish the session's unfinished turn without a new instruction."""
        return await self._run(None, session)

    async def _run(self, prompt: str | None, session_id: str | None) -> RunResult:
        opened = await self._resources()
        session = await self.session(session_id)
        permissions = _Permissions(self.on_permission, deny_unanswered=True)
        try:
            outcome = await opened.runner.run(session, prompt, [permissions])
        finally:
            await permissions.aclose()
        return result_of(session, outcome.turn_id, outcome.event)

    async def run_stream(
        self, prompt: str | None, *, session: str | None = None
    ) -> AsyncIterator[Event]:
        """Run one turn, yielding its typed events as they happen (``prompt=None`` resumes).

        The turn runs in a task of its own: a slow reader may miss text deltas (the finished
        message carries the text) but never a tool state, a permission request or the
        terminal event, which comes last. Permission requests go to ``on_permission`` when
        the agent has one; otherwise the reader answers them with ``request.decide(...)``.
        Leaving the iteration early (``break``, ``aclose``, cancellation) interrupts the turn;
        its work stays pending and the session resumable.
        """
        opened = await self._resources()
        agent_session = await self.session(session)
        channel = EventChannel()
        permissions = _Permissions(self.on_permission, deny_unanswered=False)

        async def drive() -> None:
            try:
                await opened.runner.run(agent_session, prompt, [permissions, channel])
            finally:
                channel.close()

        turn = asyncio.get_running_loop().create_task(drive())
        opened.streams[turn] = False
        turn.add_done_callback(lambda task: opened.streams.pop(task, None))
        ended = False
        try:
            async for event in channel:
                if is_terminal(event):
                    ended = True
                    if turn in opened.streams:
                        opened.streams[turn] = True
                yield event
            await turn
        finally:
            # A reader leaving after the terminal event lets the turn finish recording it.
            if not turn.done() and not ended:
                turn.cancel()
                # The runner records the interruption before the task ends: wait for it.
                await asyncio.wait([turn])
            await permissions.aclose()

    def run_sync(self, prompt: str, *, session: str | None = None) -> RunResult:
        """:meth:`run` for scripts: opens the agent, runs the turn and closes it again, in an
        event loop of its own (not from inside a running loop)."""

        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise DroverError("run_sync cannot run inside an event loop: await agent.run(...)")

        async def once() -> RunResult:
            try:
                return await self.run(prompt, session=session)
            finally:
                await self.aclose()

        return asyncio.run(once())
