"""What ``drover mcp list`` shows of a server: :class:`ServerState`. It lives apart from
:mod:`.servers`, which loads the MCP SDK, so that servers nobody approved are listed without
the SDK (about a second to import)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from drover.mcp.connection import Status
    from drover.mcp.tool import McpTool


@dataclass(frozen=True, slots=True)
class ServerState:
    """What ``drover mcp list`` shows of a server (nothing secret in it)."""

    name: str
    transport: str
    #: The command line or URL as configured (``${VAR}`` unexpanded).
    display: str
    source: str
    status: Status | str
    detail: str
    tools: tuple[McpTool, ...]
    log_path: Path
    #: Tools the server listed that are left out, each with why (a malformed schema).
    left_out: tuple[str, ...] = ()
