"""The command line's flags as an :class:`~drover.agent.agent.Agent`: ``-p``, the REPL and ``drover
serve`` run their turns through the same public objects a library user has."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from drover.agent.agent import Agent
from drover.cli.mcp import mcp_files, project_of
from drover.config.provider_tables import ProviderSettings, combined
from drover.config.settings import Config, load_config
from drover.providers.base import Provider
from drover.runtime.runner import LEASE_SECONDS
from drover.telemetry import Telemetry
from drover.telemetry.logs import configure_logging
from drover.tools.base import Tool

if TYPE_CHECKING:
    from drover.telemetry.metrics import Metrics


def agent_from_args(
    args: argparse.Namespace,
    *,
    provider: Provider | None = None,
    tools: list[Tool] | None = None,
    config: Config | None = None,
    require_sandbox: bool = False,
    lease_seconds: float = LEASE_SECONDS,
    telemetry: Telemetry | None = None,
) -> Agent:
    """The agent the run flags describe (``--model``, ``--db``, ``--workdir``,
    ``--mcp-config``, ``--allow``/``--deny``, ``--system-prompt``, …), with the project
    instructions (``AGENTS.md``) in its prompt; a ``provider`` given replaces the one
    ``--model`` names (the caller closes it). The workdir's ``.mcp.json`` servers that are not
    approved are left out, said on stderr (:mod:`drover.mcp.approval`)."""
    config = with_flags(args, config or load_config())
    project = project_of(args, config)
    if project is not None and project.skipped:
        print(project.skip_note(), file=sys.stderr, flush=True)
    return Agent(
        provider if provider is not None else args.model,
        base_url=args.base_url,
        store=args.db,
        workdir=args.workdir,
        permission_mode=args.permission_mode,
        max_turns=args.max_turns,
        sandbox=args.sandbox,
        sandbox_network=args.sandbox_network,
        sandbox_allow_domains=getattr(args, "sandbox_allow_domain", None) or (),
        require_sandbox=require_sandbox,
        lease_seconds=lease_seconds,
        tools=tools,
        config=config,
        mcp_config=mcp_files(args, project),
        allow=getattr(args, "allow", None) or (),
        deny=getattr(args, "deny", None) or (),
        system_prompt=getattr(args, "system_prompt", None),
        append_system_prompt=getattr(args, "append_system_prompt", None),
        instructions=True,
        telemetry=telemetry,
    )


def with_flags(args: argparse.Namespace, config: Config) -> Config:
    """``config`` with what ``--header`` and ``--no-chain`` set for every model."""
    headers = getattr(args, "header", None) or ()
    no_chain = bool(getattr(args, "no_chain", False))
    if not headers and not no_chain:
        return config
    every = combined(headers)
    if no_chain:
        every = ProviderSettings(chain=False).over(every)
    return config.with_overrides(every_model=every)


@contextlib.asynccontextmanager
async def cli_agent(
    args: argparse.Namespace,
    *,
    provider: Provider | None = None,
    config: Config | None = None,
    metrics: Metrics | None = None,
    require_sandbox: bool = False,
    lease_seconds: float = LEASE_SECONDS,
) -> AsyncIterator[Agent]:
    """The open agent of a command (``-p``, the REPL, ``serve``): its log written as
    ``--log-format`` says, its turns traced when ``--otel``, the config file or the ``OTEL_*``
    variables ask (:mod:`drover.telemetry`) and counted into ``metrics`` (the server's);
    the spans still buffered are exported when it closes."""
    config = config or load_config()
    configure_logging(getattr(args, "log_format", None) or config.log_format)
    asked = bool(getattr(args, "otel", False)) or config.otel
    telemetry = Telemetry.from_env(traces=asked, metrics=metrics)
    try:
        agent = agent_from_args(
            args,
            provider=provider,
            config=config,
            require_sandbox=require_sandbox,
            lease_seconds=lease_seconds,
            telemetry=telemetry,
        )
        async with agent:
            yield agent
    finally:
        if telemetry is not None:
            await telemetry.aclose()
