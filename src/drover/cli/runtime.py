"""Builds what a command needs to run turns: config, provider, store, tools, runner.

Every failure here is a :class:`~drover.errors.DroverError` with a one-line message (bad
workdir, unknown provider, missing key, unreachable database), which ``main`` prints. Whatever
fails, and wherever, each resource already built is closed (the provider in use last included,
when ``/model`` replaced the first one).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from drover.agent import (
    default_system_prompt,
    journal_files,
    open_agent_session,
    resolve_workdir,
)
from drover.config import Config, load_config
from drover.errors import DroverError
from drover.loop import LoopSettings
from drover.permissions import PermissionMode, PermissionPolicy
from drover.providers.base import Provider
from drover.providers.factory import create_provider
from drover.runner import Runner
from drover.session import AgentSession
from drover.store import open_store
from drover.store.base import SessionRecord, Store
from drover.store.redact import Redactor
from drover.tools.registry import ToolRegistry, default_registry
from drover.tools.sandbox import (
    SandboxSettings,
    SandboxStatus,
    probe_sandbox,
    settings_from_config,
)
from drover.tools.sandbox import require_sandbox as sandbox_required
from drover.workers import Coordinator, add_task_tool


@dataclass(frozen=True, slots=True, kw_only=True)
class RunOptions:
    model: str | None = None
    base_url: str | None = None
    db: str | None = None
    workdir: Path | None = None
    permission_mode: PermissionMode = "ask"
    max_turns: int | None = None
    #: ``--sandbox``: None takes the config file's mode (default ``workdir``).
    sandbox: str | None = None
    #: ``--sandbox-network``: allow network on top of the config file's setting.
    sandbox_network: bool = False


@dataclass(frozen=True, slots=True)
class OpenedSession:
    record: SessionRecord
    session: AgentSession
    #: True when this call created the session (it did not exist before).
    created: bool


@dataclass(slots=True)
class Runtime:
    config: Config
    model: str
    #: The ``--base-url`` given, kept for providers built later (``/model``).
    base_url: str | None
    provider: Provider
    store: Store
    runner: Runner
    tools: ToolRegistry
    policy: PermissionPolicy
    settings: LoopSettings
    workdir: Path
    #: Where ``bash`` runs its commands (the start-up line shows :meth:`SandboxStatus.describe`).
    sandbox: SandboxStatus
    #: Runs the ``task`` tool's workers and resumes interrupted ones (None: no ``task`` tool).
    coordinator: Coordinator | None = None

    async def session(
        self,
        *,
        session_id: str | None = None,
        continue_latest: bool = False,
        must_exist: bool = False,
    ) -> OpenedSession:
        """Open the named session (created if new, unless ``must_exist``), the latest one of
        the working directory, or a new one."""
        created = session_id is None and not continue_latest
        if session_id is not None and await self.store.get_session(session_id) is None:
            if must_exist:
                raise DroverError(f"no session {session_id} in this journal")
            created = True
        if created and must_exist:
            raise DroverError("no session given (use --session ID or --continue)")
        record = await self.runner.open_session(
            workdir=self.workdir,
            model=self.model,
            session_id=session_id,
            continue_latest=continue_latest,
        )
        session = await open_agent_session(
            self.runner,
            record,
            provider=self.provider,
            tools=self.tools,
            workdir=self.workdir,
            policy=self.policy,
            settings=self.settings,
            config=self.config,
            system_prompt=system_prompt(self.workdir),
            coordinator=self.coordinator,
        )
        return OpenedSession(record, session, created)

    async def switch_model(self, session: AgentSession, model: str) -> None:
        """Use ``model`` from the next turn on (same ``--base-url``); the pending work is
        converted. When the new provider cannot be built the old one stays in use."""
        provider = create_provider(model, self.config, base_url=self.base_url)
        try:
            session.switch_provider(provider)
        except BaseException:
            await provider.aclose()
            raise
        old, self.provider, self.model = self.provider, provider, model
        await old.aclose()


def resolve_sandbox_settings(options: RunOptions, config: Config, workdir: Path) -> SandboxSettings:
    """The sandbox from flags over the config file; the journal's SQLite file is hidden too.

    Relative paths in the config file are taken from the working directory.
    """
    return settings_from_config(
        config,
        mode=options.sandbox,
        network=options.sandbox_network,
        hidden=journal_files(options.db or os.environ.get("DROVER_DB")),
        base=workdir,
    )


#: The coding agent's system prompt; one text for the library and every front door.
system_prompt = default_system_prompt


@contextlib.asynccontextmanager
async def open_runtime(
    options: RunOptions,
    *,
    provider: Provider | None = None,
    tools: ToolRegistry | None = None,
    config: Config | None = None,
    sandbox: SandboxStatus | None = None,
    require_sandbox: bool = False,
) -> AsyncIterator[Runtime]:
    """Everything a command needs to run turns; a ``provider`` given is owned (closed) too,
    and whatever fails, each resource already built is closed. ``sandbox`` is a status already
    probed, else the settings are probed here. ``require_sandbox`` (``drover serve``) makes a
    wanted sandbox that cannot run here a :class:`~drover.errors.ConfigError` instead of a
    warning; ``--sandbox off`` still passes."""
    runtime: Runtime | None = None
    async with contextlib.AsyncExitStack() as stack:

        async def close_provider() -> None:
            # The provider in use at the end: /model may have replaced the first one.
            current = runtime.provider if runtime is not None else provider
            if current is not None:
                await current.aclose()

        stack.push_async_callback(close_provider)
        workdir = resolve_workdir(options.workdir)
        config = config or load_config()
        if sandbox is None:
            settings = resolve_sandbox_settings(options, config, workdir)
            check = sandbox_required if require_sandbox else probe_sandbox
            sandbox = await asyncio.to_thread(check, settings)
        model = options.model or config.default_model
        if provider is None:
            provider = create_provider(model, config, base_url=options.base_url)
        store = open_store(options.db or os.environ.get("DROVER_DB"))
        stack.push_async_callback(store.close)
        await store.open()
        runner = Runner(store, redactor=Redactor(config.redact_patterns))
        await runner.recover()
        coordinator = None
        if tools is None:
            # The built-in set includes the task tool; a caller's own set is taken as given.
            tools = default_registry(sandbox=sandbox)
            coordinator = Coordinator(store)
            add_task_tool(tools, coordinator)
        runtime = Runtime(
            config=config,
            model=model,
            base_url=options.base_url,
            provider=provider,
            store=store,
            runner=runner,
            tools=tools,
            policy=PermissionPolicy(options.permission_mode),
            settings=LoopSettings(max_turns=options.max_turns or config.max_turns),
            workdir=workdir,
            sandbox=sandbox,
            coordinator=coordinator,
        )
        yield runtime
