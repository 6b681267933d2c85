"""The command line's flags as an :class:`~drover.agent.Agent`: ``-p``, the REPL and ``drover
serve`` run their turns through the same public objects a library user has."""

from __future__ import annotations

import argparse
from pathlib import Path

from drover.agent import Agent, resolve_workdir
from drover.config import Config
from drover.mcp.config import default_config_files
from drover.providers.base import Provider
from drover.runner import LEASE_SECONDS
from drover.tools.base import Tool


def agent_from_args(
    args: argparse.Namespace,
    *,
    provider: Provider | None = None,
    tools: list[Tool] | None = None,
    config: Config | None = None,
    require_sandbox: bool = False,
    lease_seconds: float = LEASE_SECONDS,
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
        allow=getattr(args, "allow", None) or (),
        deny=getattr(args, "deny", None) or (),
    )


def mcp_files(args: argparse.Namespace) -> list[Path]:
    """The MCP config files the flags mean: the user-level ``mcp.json`` and the workdir's
    ``.mcp.json`` when they exist, then each ``--mcp-config FILE`` (which must)."""
    given: list[Path] = getattr(args, "mcp_config", None) or []
    return [*default_config_files(resolve_workdir(args.workdir)), *given]
