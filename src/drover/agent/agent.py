"""The entry point of every front door: :class:`Agent`, a durable, resumable tool-using agent.

An agent is a model, its tools, a system prompt, a sandbox for ``bash`` and a journal. The
library, ``drover -p``, the REPL and ``drover serve`` all build one and run their turns through
its sessions (:class:`~drover.agent.session.Session`) and its
:class:`~drover.runtime.runner.Runner`, so the journal records every turn as it happens and a turn
that ends badly (API failure, turn limit, cancellation, a killed process) leaves its work pending in
the session, where the next ``run`` or :meth:`Agent.resume` picks it up::

    async with Agent("anthropic:claude-sonnet-4-5", tools=[word_count]) as agent:
        result = await agent.run("count the words of notes.txt")
        print(result.status, result.text)
        again = await agent.run("now the lines", session=result.session_id)

A run's ``deps=`` reach its tools as ``ctx.deps`` (typed by ``ToolContext[Deps]``), and
``output_type=`` — a pydantic model, on the agent or on one run — makes the final answer JSON
validated against it: ``result.output`` is the model instance (see :mod:`drover.core.output`).

Resources (the store, the provider's HTTP client, the sandbox probe) are opened on first use
and closed by :meth:`Agent.aclose` (or the ``async with`` block). :meth:`Agent.run_sync` is the
one-call form for scripts: it opens, runs and closes inside its own event loop.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Self, overload

from pydantic import BaseModel

from drover.agent.handles import (
    delete_idle_session,
    ensure_idle,
    kept_handle,
    open_handle,
    rewind_idle_session,
)
from drover.agent.instructions import PromptParts
from drover.agent.resources import (
    Resources,
    Wanted,
    close_resources,
    open_resources,
)
from drover.agent.result import OutputT, RunOutputT, RunResult, output_schema
from drover.agent.rewind import RewindPlan, RewindResult, plan_rewind
from drover.agent.session import Session, deny_unanswered
from drover.agent.turn_stream import TurnStream
from drover.config.settings import Config
from drover.config.tables import HookSpec
from drover.core.messages import Prompt, refuse_unsendable
from drover.core.rules import Rule
from drover.errors import DroverError
from drover.journal.protocol import Store
from drover.mcp.config import McpFile
from drover.providers.base import Provider
from drover.providers.factory import create_provider
from drover.runtime.queue import IfBusy
from drover.runtime.runner import LEASE_SECONDS, Runner
from drover.runtime.turns import FollowUp, PermissionHandler
from drover.telemetry import Telemetry
from drover.tools.base import Tool
from drover.tools.sandbox import SandboxStatus
from drover.turn.permissions import PermissionMode, PermissionPolicy, rules_of

if TYPE_CHECKING:
    from drover.mcp.servers import McpServers

log = logging.getLogger(__name__)

#: Decides a permission request: ``"allow"``, ``"always"`` or ``"deny"`` (sync or async).
PermissionCallback = PermissionHandler


class Agent(Generic[OutputT]):
    """A model with tools, a system prompt and a journal; see the module docstring.

    ``model`` is a ``PROVIDER:MODEL`` spec (``anthropic:…``, ``openai:…`` for Chat Completions
    and compatible servers, ``openai-responses:…``; None: the config's default) or a
    :class:`~drover.providers.base.Provider` — e.g. drover's scripted fake,
    :class:`drover.testing.scripted.ScriptedProvider`. ``tools`` are the tools offered (None:
    the built-in coding tools and the ``task`` tool, as on the command line; their ``bash``
    runs in the sandbox ``sandbox`` names — ``workdir``, ``read-only`` or ``off``, None: the
    config's — reaching any name through drover's HTTP proxy when ``sandbox_network``, the
    names ``sandbox_allow_domains`` lists otherwise). ``store`` is a path (a ``str`` or a
    :class:`~pathlib.Path`), ``":memory:"``, a ``postgresql://`` URL or an open
    :class:`~drover.journal.protocol.Store` (None: ``DROVER_DB``,
    else the SQLite journal in the user data directory). Side-effecting tools ask
    ``on_permission`` in ``permission_mode="ask"`` (each session may have its own handler);
    without one, ``run`` denies them and a stream's reader answers them. ``output_type`` (a
    pydantic model) is the output of every run that does not give its own.

    MCP servers add their tools (``mcp__SERVER__TOOL``, :mod:`drover.mcp`): ``mcp_config``
    lists files in the ``.mcp.json`` format (``{"mcpServers": {NAME: SERVER}}``), read in order
    (an :class:`~drover.mcp.config.McpFile` takes only some servers of a file), and
    ``mcp_servers`` is such a ``mcpServers`` mapping itself (it wins over the files). The
    agent starts them when it opens and stops them when it closes; ``mcp_log_dir`` is where each
    server's stderr is kept (default: ``mcp-logs`` in the user data directory). The command
    line passes the user-level ``mcp.json``, the workdir's ``.mcp.json`` and ``--mcp-config``
    (see :func:`drover.mcp.default_config_files`).

    ``system_prompt`` replaces drover's coding-agent prompt; ``append_system_prompt`` is added
    at its end. With ``instructions`` the project's and the user's ``AGENTS.md`` (else
    ``CLAUDE.md``) files join the prompt between the two (:mod:`drover.agent.instructions`; the
    command line turns it on).

    ``hooks`` are commands run around tool calls and at a turn's end (None: the config file's
    ``[[hooks]]``; :mod:`drover.turn.hooks`); they run in the sandbox ``bash`` runs in.

    ``allow`` and ``deny`` are permission rules (:mod:`drover.core.rules`: ``"bash(git status*)"``,
    ``"write_file(src/**)"``), added to the config file's ``[permissions]``: a call an allow
    rule covers runs without asking, one a deny rule covers is refused in every mode.
    """

    def __init__(
        self,
        model: str | Provider | None = None,
        *,
        tools: Iterable[Tool] | None = None,
        system_prompt: str | None = None,
        store: str | os.PathLike[str] | Store | None = None,
        workdir: Path | str | None = None,
        permission_mode: PermissionMode = "ask",
        on_permission: PermissionCallback | None = None,
        max_turns: int | None = None,
        base_url: str | None = None,
        config: Config | None = None,
        sandbox: str | None = None,
        sandbox_network: bool = False,
        sandbox_allow_domains: Iterable[str] = (),
        require_sandbox: bool = False,
        lease_seconds: float = LEASE_SECONDS,
        output_type: type[OutputT] | None = None,
        mcp_config: Iterable[Path | str | McpFile] = (),
        mcp_servers: Mapping[str, Mapping[str, Any]] | None = None,
        mcp_log_dir: Path | str | None = None,
        allow: Iterable[str | Rule] = (),
        deny: Iterable[str | Rule] = (),
        append_system_prompt: str | None = None,
        instructions: bool = False,
        hooks: Iterable[HookSpec] | None = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        """``require_sandbox`` makes a wanted sandbox that cannot run here an error when the
        agent opens (``drover serve``) instead of ``bash`` refusing its commands.
        ``telemetry`` is what the turns are observed with (spans, metrics: see
        :mod:`drover.telemetry`); None: nothing. The caller closes it."""
        self._model = model
        PermissionPolicy(permission_mode)  # checks the mode now
        self.permission_mode: PermissionMode = permission_mode
        # Checked now: a rule that does not parse fails here.
        self._allow = rules_of(allow, "allow=")
        self._deny = rules_of(deny, "deny=")
        self.on_permission = on_permission
        self._max_turns = max_turns
        self._output = output_schema(output_type)  # a type without a schema fails here
        self._wanted = Wanted(
            config=config,
            model=model,
            tools=None if tools is None else list(tools),
            store=os.fspath(store) if isinstance(store, os.PathLike) else store,
            workdir=workdir,
            base_url=base_url,
            sandbox_mode=sandbox,
            sandbox_network=sandbox_network,
            sandbox_allow_domains=tuple(sandbox_allow_domains),
            require_sandbox=require_sandbox,
            lease_seconds=lease_seconds,
            mcp_config=list(mcp_config),
            mcp_servers=mcp_servers,
            mcp_log_dir=None if mcp_log_dir is None else Path(mcp_log_dir),
            system_prompt=system_prompt,
            append_system_prompt=append_system_prompt,
            instructions=instructions,
            hooks=None if hooks is None else list(hooks),
            telemetry=telemetry,
        )
        self.telemetry = telemetry
        self._open: Resources | None = None
        #: Serialises opening, per event loop (a lock belongs to one loop).
        self._opening: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None

    # -- resources -------------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        await self._resources()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def open(self) -> Self:
        """Open the resources now (they open on first use otherwise)."""
        await self._resources()
        return self

    async def aclose(self) -> None:
        """Interrupt the turns still running (their work is recorded), then close the store
        and the providers the agent opened (not those it was given)."""
        opened, self._open = self._open, None
        if opened is not None:
            await close_resources(opened)

    def _opened(self) -> Resources:
        if self._open is None:
            raise DroverError("the agent is not open: use `async with agent` or run it first")
        return self._open

    @property
    def store(self) -> Store:
        """The journal (the agent must be open: after a run or inside ``async with``)."""
        return self._opened().store

    @property
    def runner(self) -> Runner:
        """The owner of this agent's running turns (front doors route interrupts and
        permission answers through it)."""
        return self._opened().runner

    @property
    def workdir(self) -> Path:
        return self._opened().workdir

    @property
    def config(self) -> Config:
        return self._opened().config

    @property
    def sandbox(self) -> SandboxStatus | None:
        """Where ``bash`` runs its commands (None: the agent's own tools, no sandbox probed)."""
        return self._opened().sandbox

    @property
    def mcp(self) -> McpServers | None:
        """The MCP servers whose tools are offered (None: none configured)."""
        return self._opened().mcp

    @property
    def prompt(self) -> PromptParts:
        """The system prompt of new sessions, part by part (``.text()``: the whole)."""
        return self._opened().prompt

    @property
    def allow_rules(self) -> tuple[Rule, ...]:
        """The permission rules that run calls without asking: the config file's, then the
        agent's own."""
        return (*self.config.permissions_allow, *self._allow)

    @property
    def deny_rules(self) -> tuple[Rule, ...]:
        """The permission rules that refuse calls in every mode: the config file's, then the
        agent's own."""
        return (*self.config.permissions_deny, *self._deny)

    @property
    def model(self) -> str:
        """The model spec of new sessions (a given provider's model name)."""
        return self._opened().model

    def model_of(self, session: Session[Any]) -> str:
        opened = self._opened()
        return opened.models.get(session.id, self.model)

    async def _resources(self) -> Resources:
        loop = asyncio.get_running_loop()
        if self._opening is None or self._opening[0] is not loop:
            self._opening = (loop, asyncio.Lock())
        async with self._opening[1]:
            if self._open is not None:
                if self._open.loop is not loop:
                    raise DroverError("an agent is used from one event loop at a time")
                return self._open
            self._open = await open_resources(self._wanted)
            return self._open

    # -- sessions --------------------------------------------------------------------------------

    async def session(
        self,
        session: str | None = None,
        *,
        continue_latest: bool = False,
        must_exist: bool = False,
        owner: str | None = None,
        on_permission: PermissionCallback | None = None,
    ) -> Session[OutputT]:
        """The session with id ``session`` (created when new, unless ``must_exist``), the
        latest one of the working directory (``continue_latest``), or a new one. ``owner``
        marks a new session as someone's (the server's token hash) — made with it in one
        step, so one made under the same id by someone else at the same moment is returned
        with its own ``record.owner``, never taken over; ``on_permission`` answers its
        permission questions instead of the agent's handler."""
        opened = await self._resources()
        if session is not None:
            kept = kept_handle(opened, session, on_permission)
            if kept is not None:
                return kept
        if session is None:
            if must_exist and not continue_latest:
                raise DroverError("no session given (use --session ID or --continue)")
        elif must_exist and await opened.store.get_session(session) is None:
            raise DroverError(f"no session {session} in this journal")
        workdir = opened.workdir
        record, created = await opened.runner.open_session(
            workdir=workdir,
            model=opened.model,
            session_id=session,
            continue_latest=continue_latest,
            owner=owner,
        )
        kept = opened.sessions.get(record.id)
        if kept is not None:  # ``continue_latest`` found one already open
            return kept
        policy = PermissionPolicy(
            self.permission_mode, allow=self.allow_rules, deny=self.deny_rules, workdir=workdir
        )
        return await open_handle(
            self,
            opened,
            record,
            created=created,
            policy=policy,
            max_turns=self._max_turns,
            on_permission=on_permission or self.on_permission,
            output=self._output,
        )

    async def delete_session(self, session_id: str) -> bool:
        """Delete a stored session and everything it holds (False: there is none). Refused
        with :class:`~drover.errors.SessionBusyError` while a turn of it runs, in this
        process or in another live one; a turn a dead process left running is recovered
        first. This agent's handle of the session goes too."""
        return await delete_idle_session(await self._resources(), session_id)

    async def fork(
        self, session_id: str, *, turn_id: str | None = None, owner: str | None = None
    ) -> Session[OutputT]:
        """A new session whose history is ``session_id``'s up to and including ``turn_id``
        (None: every turn not running), owned by ``owner``; its record names the source
        (``forked_from``, ``forked_turn``). The source is left as it was."""
        opened = await self._resources()
        record = await opened.store.fork_session(session_id, turn_id=turn_id, owner=owner)
        return await self.session(record.id)

    async def plan_rewind(self, session_id: str, turn_id: str) -> RewindPlan:
        """What :meth:`rewind` of ``turn_id`` would do (files, diff, what cannot be undone)."""
        opened = await self._resources()
        await ensure_idle(opened, session_id)
        return await plan_rewind(opened.store, session_id, turn_id, opened.workdir)

    async def rewind(
        self, session_id: str, turn_id: str, *, files: bool = True, force: bool = False
    ) -> RewindResult:
        """Undo ``turn_id`` and every later turn of the session (see :mod:`drover.agent.rewind`):
        the conversation goes on from before it and, with ``files``, the files its tools wrote
        inside the working directory are put back — refused with
        :class:`~drover.agent.rewind.RewindConflict` when one changed outside drover since, unless
        ``force``. Refused with :class:`~drover.errors.SessionBusyError` while a turn of the
        session runs; while it works no turn starts (a message then is refused, or queued and
        run once the rewind is done)."""
        opened = await self._resources()
        result = await rewind_idle_session(opened, session_id, turn_id, files=files, force=force)
        if await opened.store.queued_messages(session_id):
            # Messages queued while the rewind held the session run now, as after a turn.
            handle = await self.session(session_id)
            handler = handle.on_permission or deny_unanswered
            opened.runner.queue.follow(FollowUp(handle.engine, (), handler, None))
        return result

    async def switch_model(self, session: Session[Any], model: str) -> None:
        """Use ``model`` for ``session`` from its next turn on (the agent's ``base_url``);
        its pending work is converted. When the new provider cannot be built the old one
        stays in use."""
        opened = self._opened()
        provider = create_provider(model, opened.config, base_url=self._wanted.base_url)
        try:
            session.engine.switch_provider(provider)
        except BaseException:
            await provider.aclose()
            raise
        opened.providers.append(provider)
        opened.models[session.id] = model

    # -- turns -----------------------------------------------------------------------------------

    @overload
    async def run(
        self,
        prompt: Prompt,
        *,
        session: str | None = ...,
        deps: object = ...,
        output_type: None = ...,
        if_busy: IfBusy = ...,
    ) -> RunResult[OutputT]: ...

    @overload
    async def run(
        self,
        prompt: Prompt,
        *,
        session: str | None = ...,
        deps: object = ...,
        output_type: type[RunOutputT],
        if_busy: IfBusy = ...,
    ) -> RunResult[RunOutputT]: ...

    async def run(
        self,
        prompt: Prompt,
        *,
        session: str | None = None,
        deps: object = None,
        output_type: type[Any] | None = None,
        if_busy: IfBusy = "reject",
    ) -> RunResult[Any]:
        """Run one turn for ``prompt`` in ``session`` (None: a new session).

        Pending work of the session goes before the prompt. Cancelling the call interrupts
        the turn; its work stays pending in the journal. ``deps`` reach the tools as
        ``ctx.deps``; ``output_type`` overrides the agent's for this run. ``if_busy`` says
        what happens while a turn of the session runs (:meth:`drover.agent.session.Session.run`).
        A blank prompt (empty or white space only) raises
        :class:`~drover.errors.BlankPromptError`, a ``ValueError``, before a new session is
        created.
        """
        refuse_unsendable(prompt)
        handle = await self.session(session)
        return await handle.run(prompt, deps=deps, output_type=output_type, if_busy=if_busy)

    @overload
    async def resume(
        self, session: str, *, deps: object = ..., output_type: None = ...
    ) -> RunResult[OutputT]: ...

    @overload
    async def resume(
        self, session: str, *, deps: object = ..., output_type: type[RunOutputT]
    ) -> RunResult[RunOutputT]: ...

    async def resume(
        self, session: str, *, deps: object = None, output_type: type[Any] | None = None
    ) -> RunResult[Any]:
        """Finish the session's unfinished turn without a new instruction (``deps`` and
        ``output_type`` as for :meth:`run`: what the interrupted run had is not kept)."""
        handle = await self.session(session)
        return await handle.resume(deps=deps, output_type=output_type)

    @overload
    def run_stream(
        self,
        prompt: Prompt | None,
        *,
        session: str | None = ...,
        deps: object = ...,
        output_type: None = ...,
    ) -> _AgentStream[OutputT]: ...

    @overload
    def run_stream(
        self,
        prompt: Prompt | None,
        *,
        session: str | None = ...,
        deps: object = ...,
        output_type: type[RunOutputT],
    ) -> _AgentStream[RunOutputT]: ...

    def run_stream(
        self,
        prompt: Prompt | None,
        *,
        session: str | None = None,
        deps: object = None,
        output_type: type[Any] | None = None,
    ) -> _AgentStream[Any]:
        """Run one turn, yielding its typed events as they happen (``prompt=None`` resumes),
        as a context manager (see :mod:`drover.agent.turn_stream`)::

            async with agent.run_stream("fix the test") as stream:
                async for event in stream:
                    ...

        Leaving the block before the terminal event interrupts the turn; its work stays
        pending and the session is free and resumable at once. ``deps`` and ``output_type``
        as for :meth:`run`."""
        return _AgentStream(self, prompt, session, deps=deps, output_type=output_type)

    @overload
    def run_sync(
        self,
        prompt: Prompt,
        *,
        session: str | None = ...,
        deps: object = ...,
        output_type: None = ...,
    ) -> RunResult[OutputT]: ...

    @overload
    def run_sync(
        self,
        prompt: Prompt,
        *,
        session: str | None = ...,
        deps: object = ...,
        output_type: type[RunOutputT],
    ) -> RunResult[RunOutputT]: ...

    def run_sync(
        self,
        prompt: Prompt,
        *,
        session: str | None = None,
        deps: object = None,
        output_type: type[Any] | None = None,
    ) -> RunResult[Any]:
        """:meth:`run` for scripts: opens the agent, runs the turn and closes it again, in an
        event loop of its own (not from inside a running loop)."""

        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise DroverError("run_sync cannot run inside an event loop: await agent.run(...)")
        refuse_unsendable(prompt)

        async def once() -> RunResult[Any]:
            try:
                handle = await self.session(session)
                return await handle.run(prompt, deps=deps, output_type=output_type)
            finally:
                await self.aclose()

        return asyncio.run(once())


class _AgentStream(TurnStream[OutputT]):
    """:meth:`Agent.run_stream`: opens the agent and the session on entering."""

    def __init__(
        self,
        agent: Agent[Any],
        prompt: Prompt | None,
        session: str | None,
        *,
        deps: object,
        output_type: type[BaseModel | str] | None,
    ) -> None:
        super().__init__(None, prompt, deps=deps, output_type=output_type)
        self._agent = agent
        self._session_id = session

    async def _open_session(self) -> Session[Any]:
        return await self._agent.session(self._session_id)
