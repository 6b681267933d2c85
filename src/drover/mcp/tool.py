"""An MCP server's tool as a drover :class:`~drover.tools.base.Tool`: ``mcp__SERVER__TOOL``.

The model sees ``mcp__SERVER__TOOL`` (the name every MCP client uses), with the server's
description and input schema (adapted only where a provider would refuse it,
:mod:`drover.mcp.schema`). Characters the APIs refuse in a name become ``_``, and a name
longer than the 64 characters they allow is cut and ends with a hash of the full one, so two
tools never share a name.

A call goes to the server's connection (:mod:`drover.mcp.connection`); its progress
notifications become the call's :class:`~drover.core.events.ToolProgress` events and its result
drover's text output (:mod:`drover.mcp.results`). Permissions come from the configuration: a
tool is side-effecting (it asks) unless its server or the tool itself is marked ``readOnly``,
and asks unless marked ``trust``. An MCP tool is never ``contained``: it runs outside the
``bash`` sandbox and ``--permission-mode sandboxed`` gives it nothing of ``bash``'s rights.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

import mcp_types as types

from drover.mcp.connection import McpConnection
from drover.mcp.results import output_of
from drover.mcp.schema import adapt_schema
from drover.tools.base import ToolContext, ToolOutput

MAX_NAME = 64
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def tool_name(server: str, tool: str) -> str:
    """The name the model calls a server's tool by."""
    name = f"mcp__{_UNSAFE.sub('_', server)}__{_UNSAFE.sub('_', tool)}"
    if len(name) <= MAX_NAME and name == f"mcp__{server}__{tool}":
        return name
    # Changed or cut: a hash of the real names keeps it apart from every other.
    digest = hashlib.sha256(f"{server}\0{tool}".encode()).hexdigest()[:8]
    if len(name) <= MAX_NAME - 9:
        return f"{name}_{digest}"
    return f"{name[: MAX_NAME - 9]}_{digest}"


class McpTool:
    def __init__(self, connection: McpConnection, spec: types.Tool) -> None:
        self._connection = connection
        #: The tool's name on its server.
        self.remote_name = spec.name
        self._name = tool_name(connection.name, spec.name)
        title = spec.title or (spec.annotations.title if spec.annotations else None)
        self._description = (
            spec.description
            or title
            or f"The tool {spec.name} of the MCP server {connection.name}."
        )
        self._schema = adapt_schema(spec.input_schema)

    @property
    def name(self) -> str:
        return self._name

    @property
    def server(self) -> str:
        return self._connection.name

    @property
    def description(self) -> str:
        return self._description

    @property
    def input_schema(self) -> Mapping[str, Any]:
        return self._schema

    @property
    def read_only(self) -> bool:
        return self._connection.config.is_read_only(self.remote_name)

    @property
    def trusted(self) -> bool:
        return self._connection.config.is_trusted(self.remote_name)

    async def run(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        result = await self._connection.call(self.remote_name, args, progress=ctx.on_progress)
        return output_of(result)

    def __repr__(self) -> str:
        return f"McpTool({self._name!r})"
