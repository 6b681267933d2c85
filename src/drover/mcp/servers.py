"""The MCP servers of one agent: started together, their tools registered, stopped together.

:meth:`McpServers.start` starts every configured server at once and waits until each has
listed its tools or failed (each within its ``startupTimeout``); a server that fails is logged
and left out — the others' tools are still offered, and ``drover mcp list`` tells why. A tool
whose input schema is malformed (:class:`~drover.mcp.schema.SchemaError`) is left out the same
way, with one line saying where, and its server's other tools are offered. The
tools of the servers that started are added to the agent's registry by :meth:`register`; a
server that fails later is restarted by the call that needs it (:mod:`drover.mcp.connection`).
:meth:`aclose` stops them all (the agent closing).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path

from drover.errors import ToolError
from drover.mcp.config import McpServerConfig, redact_patterns
from drover.mcp.connection import McpConnection
from drover.mcp.logs import default_log_dir
from drover.mcp.schema import SchemaError
from drover.mcp.state import ServerState
from drover.mcp.tool import McpTool
from drover.tools.registry import ToolRegistry

log = logging.getLogger(__name__)


class McpServers:
    def __init__(
        self,
        configs: Sequence[McpServerConfig],
        *,
        workdir: Path,
        log_dir: Path | None = None,
        version: str = "",
    ) -> None:
        log_dir = log_dir or default_log_dir()
        self.connections = [
            McpConnection(config, workdir=workdir, log_dir=log_dir, version=version)
            for config in configs
        ]
        self._tools: list[McpTool] = []
        #: By server, its tools left out and why.
        self._left_out: dict[str, list[str]] = {}

    @property
    def configs(self) -> list[McpServerConfig]:
        return [c.config for c in self.connections]

    def redact_patterns(self) -> list[str]:
        """The servers' secrets, as patterns for the journal's redactor."""
        return redact_patterns(self.configs)

    async def start(self) -> None:
        """Start every server and list its tools (failures are logged, not raised)."""
        await asyncio.gather(*(self._start_one(c) for c in self.connections))
        self._tools, self._left_out = [], {}
        taken: set[str] = set()
        for connection in self.connections:
            for spec in connection.tools if connection.status == "ready" else ():
                try:
                    tool = McpTool(connection, spec)
                except SchemaError as exc:
                    why = connection.config.scrub(str(exc))
                    self._left_out.setdefault(connection.name, []).append(f"{spec.name}: {why}")
                    log.warning(
                        "MCP server %r: its tool %r is left out: %s",
                        connection.name,
                        spec.name,
                        why,
                    )
                    continue
                if tool.name in taken:
                    log.warning("MCP: two tools are named %s; the second is left out", tool.name)
                    continue
                taken.add(tool.name)
                self._tools.append(tool)

    async def _start_one(self, connection: McpConnection) -> None:
        if connection.config.error is not None:
            log.warning(
                "MCP server %r is not started: %s", connection.name, connection.config.error
            )
            return
        try:
            await connection.start()
        except ToolError as exc:
            log.warning("%s; its tools are not available", str(exc).splitlines()[0])

    @property
    def tools(self) -> list[McpTool]:
        """The tools of the servers that started."""
        return list(self._tools)

    def register(self, registry: ToolRegistry) -> None:
        """Offer the tools through ``registry`` (one that clashes with a name there is left out)."""
        for tool in self._tools:
            if tool.name in registry:
                log.warning("MCP: the tool %s clashes with a tool of that name", tool.name)
                continue
            registry.register(tool)

    def states(self) -> list[ServerState]:
        out = []
        for connection in self.connections:
            config = connection.config
            disabled = config.error is not None
            out.append(
                ServerState(
                    name=config.name,
                    transport=config.transport,
                    display=config.display,
                    source=config.source,
                    status="not started" if disabled else connection.status,
                    detail=config.error or connection.detail,
                    tools=tuple(t for t in self._tools if t.server == config.name),
                    log_path=connection.log.path,
                    left_out=tuple(self._left_out.get(config.name, ())),
                )
            )
        return out

    async def aclose(self) -> None:
        """Stop every server."""
        await asyncio.gather(*(c.aclose() for c in self.connections))
