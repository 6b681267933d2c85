"""A small MCP server over stdio, written against the wire (no SDK), for what the reference
servers cannot do: publish a malformed tool schema, leave a process behind, say where it runs.

Run as ``python raw_mcp.py`` or ``python -m raw_mcp`` (with this directory on ``PYTHONPATH``).
The environment variable ``RAW_MCP`` holds its behaviour as JSON:

- ``"tools"``: the tools it lists, ``[{"name", "inputSchema"}]`` (default: one tool, ``where``);
- ``"grandchild"``: a file to write ``SERVER_PID CHILD_PID`` to, after starting a child that
  sleeps (in the server's process group, holding its stdout) — what a server leaves behind;

Every tool answers with ``{"tool", "arguments", "cwd", "path", "pythonpath"}`` as JSON text.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

DEFAULT_TOOLS = [{"name": "where", "inputSchema": {"type": "object", "properties": {}}}]


def main() -> None:
    spec = json.loads(os.environ.get("RAW_MCP", "{}"))
    if spec.get("grandchild"):
        child = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(600)"], stdin=subprocess.DEVNULL
        )
        with open(spec["grandchild"], "w", encoding="utf-8") as file:
            file.write(f"{os.getpid()} {child.pid}\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        if "id" not in message:
            continue  # a notification
        answer = _answer(spec, message["method"], message.get("params") or {})
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": message["id"]}
        if answer is None:
            reply["error"] = {"code": -32601, "message": f"no method {message['method']}"}
        else:
            reply["result"] = answer
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


def _answer(spec: dict[str, Any], method: str, params: dict[str, Any]) -> dict[str, Any] | None:
    if method == "initialize":
        return {
            "protocolVersion": params.get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "raw", "version": "1"},
        }
    if method == "ping":
        return {}
    if method == "tools/list":
        return {"tools": spec.get("tools", DEFAULT_TOOLS)}
    if method == "tools/call":
        said = {
            "tool": params.get("name"),
            "arguments": params.get("arguments"),
            "cwd": os.getcwd(),
            "path": os.environ.get("PATH", ""),
            "pythonpath": os.environ.get("PYTHONPATH", ""),
        }
        return {"content": [{"type": "text", "text": json.dumps(said)}], "isError": False}
    return None


if __name__ == "__main__":
    main()
