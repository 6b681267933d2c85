"""The command line's flags as an :class:`~drover.agent.Agent`: ``-p``, the REPL and ``drover
serve`` run their turns through the same public objects a library user has."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

from drover.agent import Agent, resolve_workdir
from drover.config import Config, load_config
from drover.mcp.config import default_config_files
from drover.providers.base import Provider
from drover.runner import LEASE_SECONDS
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
    ``--mcp-config``, …); a
    ``provider`` given replaces the one ``--model`` names (the caller closes it)."""
    return Agent(
        provider if provider is not None else args.model,
        base_url=args.base_url,
        store=args.db,
        workdir=args.workdir,
        permission_mode=args.permission_mode,
        max_turns=args.max_turns,
        sandbox=args.sandbox,
        sandbox_network=args.sandbox_network,
        require_sandbox=require_sandbox,
        lease_seconds=lease_seconds,
        tools=tools,
        config=config,
        mcp_config=mcp_files(args),
        telemetry=telemetry,
    )


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


def mcp_files(args: argparse.Namespace) -> list[Path]:
    """The MCP config files the flags mean: the user-level ``mcp.json`` and the workdir's
    ``.mcp.json`` when they exist, then each ``--mcp-config FILE`` (which must)."""
    given: list[Path] = getattr(args, "mcp_config", None) or []
    return [*default_config_files(resolve_workdir(args.workdir)), *given]
