"""What an open :class:`~drover.agent.agent.Agent` holds, built and closed together.

:func:`open_resources` turns an agent's settings into its working parts — the journal, the
provider, the runner, the tools (the built-in ones run ``bash`` in the sandbox probed here),
the ``task`` tool's coordinator and the MCP servers — in an order that fails early on what is
cheap to check (the workdir, the MCP files, the sandbox, the model and its key) before
anything is opened, and closes whatever it opened when a later step fails.
:func:`close_resources` closes them again, the turns still running first.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from drover.agent.instructions import InstructionFile, PromptParts, find_instructions
from drover.agent.session import Session
from drover.config.expand import secret_patterns
from drover.config.settings import Config, load_config
from drover.config.tables import HookSpec
from drover.config.workdir import resolve_workdir
from drover.journal.protocol import Store
from drover.journal.redact import Redactor
from drover.mcp.config import McpFile, load_servers, redact_patterns
from drover.providers.base import Provider
from drover.providers.factory import create_provider
from drover.runtime.runner import Runner
from drover.runtime.workers import Coordinator, add_task_tool
from drover.store import open_store
from drover.telemetry import Telemetry
from drover.tools.base import Tool
from drover.tools.registry import ToolRegistry, default_registry
from drover.tools.sandbox import (
    SandboxSettings,
    SandboxStatus,
    probe_sandbox,
    require_sandbox,
    settings_from_config,
)
from drover.turn.hooks import Hooks, hook_scripts

if TYPE_CHECKING:
    from drover.mcp.servers import McpServers


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


def sandbox_settings_for(
    config: Config,
    workdir: Path,
    *,
    db: str | None = None,
    mode: str | None = None,
    network: bool = False,
    allow_domains: Sequence[str] = (),
    hooks: Sequence[HookSpec] = (),
) -> SandboxSettings:
    """The sandbox of an agent: ``mode``/``network`` (the flags) over the config file's
    ``[sandbox]``, with the journal's SQLite file (``db``) hidden too and the scripts of
    ``hooks`` protected (:func:`~drover.turn.hooks.hook_scripts`); relative paths in the config
    file are taken from the workdir; ``allow_domains`` (``--sandbox-allow-domain``) adds to
    the file's."""
    settings = settings_from_config(
        config,
        mode=mode,
        network=network,
        hidden=journal_files(db),
        base=workdir,
        allow_domains=allow_domains,
    )
    scripts = hook_scripts(hooks, workdir)
    if not scripts:
        return settings
    return dataclasses.replace(settings, protected=(*settings.protected, *scripts))


@dataclass(frozen=True, slots=True, kw_only=True)
class Wanted:
    """What an agent was asked to open (its constructor's arguments)."""

    #: None: the config file's (read when the agent opens).
    config: Config | None
    model: str | Provider | None
    tools: Sequence[Tool] | None
    store: str | Store | None
    workdir: Path | str | None
    base_url: str | None
    sandbox_mode: str | None
    sandbox_network: bool
    require_sandbox: bool
    lease_seconds: float
    mcp_config: Sequence[Path | str | McpFile]
    mcp_servers: Mapping[str, Mapping[str, Any]] | None
    mcp_log_dir: Path | None
    #: The prompt that replaces drover's own (None: drover's) and what is added at its end.
    system_prompt: str | None = None
    append_system_prompt: str | None = None
    #: Whether the project's and the user's AGENTS.md files join the prompt.
    instructions: bool = False
    #: Names the sandbox's proxy admits besides the config file's ``allow_domains``.
    sandbox_allow_domains: tuple[str, ...] = ()
    #: The hooks (None: the config file's ``[[hooks]]``).
    hooks: Sequence[HookSpec] | None = None
    #: What the turns are observed with (None: nothing).
    telemetry: Telemetry | None = None


@dataclass(slots=True)
class Resources:
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
    sandbox: SandboxStatus | None
    #: The MCP servers whose tools are offered (None: none configured).
    mcp: McpServers | None
    #: The model spec of new sessions.
    model: str
    loop: asyncio.AbstractEventLoop
    #: The system prompt of new sessions, part by part.
    prompt: PromptParts
    #: The configured hooks (None: none).
    hooks: Hooks | None
    #: Handles kept between turns, least recently used first.
    sessions: OrderedDict[str, Session[Any]] = field(default_factory=OrderedDict)
    #: Providers a session switched to (``/model``), closed with the agent.
    providers: list[Provider] = field(default_factory=list)
    #: The model spec each session uses, when not the agent's.
    models: dict[str, str] = field(default_factory=dict)


async def open_resources(wanted: Wanted) -> Resources:
    """The working parts of an agent (see the module docstring)."""
    config = wanted.config or load_config()
    workdir = resolve_workdir(wanted.workdir)
    # A broken MCP file fails here, before anything is opened.
    mcp_configs = load_servers(wanted.mcp_config, wanted.mcp_servers)
    sandbox: SandboxStatus | None = None
    hook_specs = config.hooks if wanted.hooks is None else tuple(wanted.hooks)
    # Hooks run where bash runs: probed for them too when the tools are the caller's.
    if wanted.tools is None or hook_specs:
        db = wanted.store if isinstance(wanted.store, str) else os.environ.get("DROVER_DB")
        check = require_sandbox if wanted.require_sandbox else probe_sandbox
        settings = sandbox_settings_for(
            config,
            workdir,
            db=db,
            mode=wanted.sandbox_mode,
            network=wanted.sandbox_network,
            allow_domains=wanted.sandbox_allow_domains,
            hooks=hook_specs,
        )
        sandbox = await asyncio.to_thread(check, settings)
    if wanted.model is None or isinstance(wanted.model, str):
        # A misspelt model or a missing key fails before anything is opened.
        spec = wanted.model or config.default_model
        provider: Provider = create_provider(spec, config, base_url=wanted.base_url)
        owns_provider = True
    else:
        provider, owns_provider = wanted.model, False
        spec = provider.model
    async with contextlib.AsyncExitStack() as stack:
        if owns_provider:
            stack.push_async_callback(provider.aclose)
        if isinstance(wanted.store, str | None):
            store = open_store(wanted.store or os.environ.get("DROVER_DB"))
            stack.push_async_callback(store.close)
            await store.open()
            owns_store = True
        else:
            store, owns_store = wanted.store, False
        runner = Runner(
            store,
            # The MCP servers' secrets and the model's headers too: what a server or a model
            # echoes back is redacted.
            redactor=Redactor(
                [
                    *config.redact_patterns,
                    *redact_patterns(mcp_configs),
                    *secret_patterns(config.secrets),
                ]
            ),
            lease_seconds=wanted.lease_seconds,
            telemetry=wanted.telemetry,
        )
        coordinator = None
        if wanted.tools is None:
            assert sandbox is not None
            # The built-in set includes the task tool; a caller's own set is taken as given.
            tools = default_registry(sandbox=sandbox)
            coordinator = Coordinator(store)
            add_task_tool(tools, coordinator)
        else:
            tools = ToolRegistry(wanted.tools)
        mcp = None
        if mcp_configs:
            from drover.mcp.servers import McpServers

            mcp = McpServers(mcp_configs, workdir=workdir, log_dir=wanted.mcp_log_dir)
            stack.push_async_callback(mcp.aclose)
            await mcp.start()
            mcp.register(tools)
        stack.pop_all()
    hooks = Hooks(hook_specs, workdir=workdir, sandbox=sandbox) if hook_specs else None
    files: list[InstructionFile] = []
    if wanted.instructions:
        files = await asyncio.to_thread(find_instructions, workdir)
    prompt = PromptParts(
        base=default_system_prompt(workdir)
        if wanted.system_prompt is None
        else wanted.system_prompt,
        replaced=wanted.system_prompt is not None,
        files=tuple(files),
        append=wanted.append_system_prompt,
    )
    return Resources(
        hooks=hooks,
        prompt=prompt,
        store=store,
        owns_store=owns_store,
        provider=provider,
        owns_provider=owns_provider,
        runner=runner,
        tools=tools,
        coordinator=coordinator,
        config=config,
        workdir=workdir,
        sandbox=sandbox,
        mcp=mcp,
        model=spec,
        loop=asyncio.get_running_loop(),
    )


async def close_resources(opened: Resources) -> None:
    """Interrupt the turns still running (their work is recorded), then close the MCP
    servers, the providers and the store that were opened (not those given)."""
    try:
        await opened.runner.shutdown()
    finally:
        try:
            if opened.mcp is not None:
                await opened.mcp.aclose()
            for provider in opened.providers:
                with contextlib.suppress(Exception):
                    await provider.aclose()
            if opened.owns_provider:
                await opened.provider.aclose()
        finally:
            if opened.owns_store:
                await opened.store.close()
