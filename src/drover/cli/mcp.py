"""``drover mcp list``: the configured MCP servers, whether they start, and their tools.

Each server is started as a turn would start it (same files, same expansion, same timeouts),
asked for its tools and stopped again. Nothing secret is shown: commands and URLs appear as
written, ``${VAR}`` unexpanded. Exit status 0 when every server started, 1 otherwise (or on a
broken config file, which is one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any

from drover.cli.build import mcp_files
from drover.mcp.config import PROJECT_FILE, load_servers, user_config_file
from drover.mcp.servers import McpServers, ServerState
from drover.resources import resolve_workdir

#: Characters of a tool's description shown in the text listing.
DESCRIPTION_CHARS = 80


async def list_servers(args: argparse.Namespace) -> int:
    workdir = resolve_workdir(args.workdir)
    configs = load_servers(mcp_files(args))
    if not configs:
        if args.json:
            print(json.dumps({"servers": []}))
        else:
            print(
                f"no MCP servers configured (looked in {user_config_file()} and "
                f"{workdir / PROJECT_FILE}; add files with --mcp-config FILE)"
            )
        return 0
    # The listing says why a server failed; the start-up warnings would say it twice.
    logging.getLogger("drover.mcp").addHandler(logging.NullHandler())
    servers = McpServers(configs, workdir=workdir)
    try:
        await servers.start()
    finally:
        await servers.aclose()
    states = servers.states()
    if args.json:
        print(json.dumps({"servers": [_as_json(s) for s in states]}, ensure_ascii=False, indent=2))
    else:
        sys.stdout.write("".join(_as_text(s) for s in states))
    return 0 if all(_started(s) for s in states) else 1


def _started(state: ServerState) -> bool:
    return state.status in ("ready", "stopped") and not state.detail


def _as_text(state: ServerState) -> str:
    lines = [f"{state.name}  {state.transport}  {state.display}  (from {state.source})"]
    if _started(state):
        count = len(state.tools)
        lines.append(f"  started: {count} tool{'s' if count != 1 else ''}  (log: {state.log_path})")
    else:
        lines.append(f"  {state.status}: {state.detail}  (log: {state.log_path})")
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
