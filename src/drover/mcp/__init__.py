"""Tools from Model Context Protocol servers, with drover's guarantees, on the official ``mcp`` SDK.

An agent given MCP servers (``Agent(mcp_config=[files], mcp_servers={...})``; on the command
line the user-level ``mcp.json``, the workdir's ``.mcp.json`` — its servers once approved,
:mod:`.approval` — and ``--mcp-config FILE``)
starts them when it opens, offers each server's tools to the model as ``mcp__SERVER__TOOL``,
and stops them when it closes. A call is an ordinary tool call of the turn: journaled state by
state, interrupted like any other (the server gets ``notifications/cancelled``), and a server
that fails, crashes or hangs only fails that call — it is restarted on its next use.

Modules: :mod:`.config` (the ``.mcp.json`` format, ``${VAR}`` expansion, secrets),
:mod:`.connection` (one server's client: start, restart, calls, timeouts, cancellation),
:mod:`.logs` (each server's log file), :mod:`.tool` (the drover tool), :mod:`.schema`
(schemas every provider accepts), :mod:`.results` (results as text), :mod:`.servers` (an
agent's servers together), :mod:`.state` (what ``drover mcp list`` shows of one),
:mod:`.approval` (a project's servers start only once approved).
Only :mod:`.config` is imported here: the SDK loads when a server is configured.
"""

from drover.mcp.config import McpFile, McpServerConfig, default_config_files, load_servers

__all__ = ["McpFile", "McpServerConfig", "default_config_files", "load_servers"]
