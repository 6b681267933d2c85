"""``drover mcp list|approve|revoke``: the configured MCP servers, and a project's approval.

``list`` starts each server as a turn would start it (same files, same expansion, same
timeouts), asks for its tools and stops it again; a server of the workdir's ``.mcp.json`` that
is not approved is listed as such and not started. Nothing secret is shown: commands and URLs
appear as written, ``${VAR}`` unexpanded. Exit status 0 when every server it started started,
1 otherwise (or on a broken config file, which is one line on stderr). ``approve`` approves
the workdir's ``.mcp.json`` servers as the file is now; ``revoke`` forgets the answer kept for
it (:mod:`drover.mcp.approval`). :func:`mcp_files` says which MCP config files a run's flags
mean, for every command that runs turns.

The MCP SDK (~1 s to import) loads only when a server is started: ``approve``, ``revoke`` and
a ``list`` with no server to start (none configured, or only servers nobody approved) do
without it.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

from drover.config.settings import Config, load_config
from drover.config.workdir import resolve_workdir
from drover.core.visible import visible
from drover.mcp.approval import (
    HOW_TO_APPROVE,
    Approvals,
    ProjectServers,
    approve_all,
    project_servers,
)
from drover.mcp.config import (
    PROJECT_FILE,
    McpFile,
    McpServerConfig,
    load_servers,
    user_config_file,
)
from drover.mcp.logs import default_log_dir
from drover.mcp.state import ServerState

#: The status of a project server nobody approved.
NOT_APPROVED = "not approved"

#: Characters of a tool's description shown in the text listing.
DESCRIPTION_CHARS = 80


async def list_servers(args: argparse.Namespace) -> int:
    workdir = resolve_workdir(args.workdir)
    project = project_of(args, load_config())
    configs = load_servers(mcp_files(args, project))
    # A project's servers nobody approved are listed, never started.
    unapproved = (
        [] if project is None else [s for s in project.servers if s.name in project.skipped]
    )
    if not configs and not unapproved:
        if args.json:
            print(json.dumps({"servers": []}))
        else:
            print(
                f"no MCP servers configured (looked in {user_config_file()} and "
                f"{workdir / PROJECT_FILE}; add files with --mcp-config FILE)"
            )
        return 0
    states: list[ServerState] = []
    if configs:
        # The MCP SDK (and the web server it brings) loads only when a server is started.
        from drover.mcp.servers import McpServers

        # The listing says why a server failed; the start-up warnings would say it twice.
        logging.getLogger("drover.mcp").addHandler(logging.NullHandler())
        servers = McpServers(configs, workdir=workdir)
        try:
            await servers.start()
        finally:
            await servers.aclose()
        states = servers.states()
    waiting = [_not_approved(config, project) for config in unapproved if project is not None]
    if args.json:
        listed = [_as_json(s) for s in [*states, *waiting]]
        print(json.dumps({"servers": listed}, ensure_ascii=False, indent=2))
    else:  # (what servers say of themselves is shown, never obeyed, by the terminal)
        sys.stdout.write(visible("".join(_as_text(s) for s in [*states, *waiting]), code=True))
    return 0 if all(_started(s) for s in states) else 1


def _not_approved(config: McpServerConfig, project: ProjectServers) -> ServerState:
    how = HOW_TO_APPROVE.format(workdir=f" --workdir {project.workdir}")
    return ServerState(
        name=config.name,
        transport=config.transport,
        display=config.display,
        source=config.source,
        status=NOT_APPROVED,
        detail=f"{'declined' if config.name in project.declined else 'not started'}; {how}",
        tools=(),
        log_path=default_log_dir() / f"{config.name}.log",
    )


def project_of(args: argparse.Namespace, config: Config) -> ProjectServers | None:
    """The workdir's ``.mcp.json`` and which of its servers are approved (None: none)."""
    return project_servers(resolve_workdir(args.workdir), config)


def mcp_files(args: argparse.Namespace, project: ProjectServers | None) -> list[Path | McpFile]:
    """The MCP config files the flags mean: the user-level ``mcp.json`` when it exists, the
    approved servers of the workdir's ``.mcp.json``, then each ``--mcp-config FILE`` (which
    must exist)."""
    given: list[Path] = getattr(args, "mcp_config", None) or []
    user = user_config_file()
    files: list[Path | McpFile] = [user] if user.is_file() else []
    if project is not None and project.approved:
        files.append(project.file())
    return [*files, *given]


def approve(args: argparse.Namespace) -> int:
    """``drover mcp approve``: start the workdir's ``.mcp.json`` servers from now on (until the
    file changes)."""
    project = project_of(args, load_config())
    if project is None or not project.names:
        print(f"no MCP servers in {resolve_workdir(args.workdir) / PROJECT_FILE}")
        return 0
    approve_all(project)
    for config in project.servers:
        print(f"approved {config.name}: {config.display}")
    print(f"(for {project.path} as it is now: a changed file asks again)")
    return 0


def revoke(args: argparse.Namespace) -> int:
    """``drover mcp revoke``: forget the answer kept for the workdir's ``.mcp.json``."""
    workdir = resolve_workdir(args.workdir)
    if Approvals().forget(workdir):
        print(f"forgot the answer for {workdir / PROJECT_FILE}: the REPL asks again")
    else:
        print(f"no answer kept for {workdir / PROJECT_FILE}")
    return 0


def _started(state: ServerState) -> bool:
    return state.status in ("ready", "stopped") and not state.detail


def _as_text(state: ServerState) -> str:
    lines = [f"{state.name}  {state.transport}  {state.display}  (from {state.source})"]
    if _started(state):
        count = len(state.tools)
        lines.append(f"  started: {count} tool{'s' if count != 1 else ''}  (log: {state.log_path})")
    else:
        lines.append(f"  {state.status}: {state.detail}  (log: {state.log_path})")
    lines += [f"    left out: {why}" for why in state.left_out]
    for tool in state.tools:
        marks = "read-only" if tool.read_only else "trusted" if tool.trusted else "asks"
        description = tool.description.splitlines()[0] if tool.description else ""
        if len(description) > DESCRIPTION_CHARS:
            description = description[: DESCRIPTION_CHARS - 1].rstrip() + "…"
        lines.append(f"    {tool.name}  [{marks}]  {description}")
    return "\n".join(lines) + "\n"


def _as_json(state: ServerState) -> dict[str, Any]:
    return {
        "name": state.name,
        "transport": state.transport,
        "command" if state.transport == "stdio" else "url": state.display,
        "source": state.source,
        "status": "started" if _started(state) else state.status,
        "error": None if _started(state) else state.detail,
        "log": str(state.log_path),
        "left_out": list(state.left_out),
        "tools": [
            {
                "name": tool.name,
                "server_name": tool.remote_name,
                "description": tool.description,
                "read_only": tool.read_only,
                "trusted": tool.trusted,
            }
            for tool in state.tools
        ],
    }
