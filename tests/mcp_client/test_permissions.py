"""Which MCP calls ask: side-effecting unless marked, ``trust`` skips the question but not
``deny``, and an MCP tool gets nothing of ``bash``'s sandbox rights."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mcp_types as types
import pytest

from drover.mcp.config import parse_server
from drover.mcp.connection import McpConnection
from drover.mcp.tool import McpTool
from drover.turn.permissions import PermissionMode, PermissionPolicy


def mcp_tool(tmp_path: Path, name: str, **marks: Any) -> McpTool:
    config = parse_server("srv", {"command": "x", **marks}, "f.json", {})
    connection = McpConnection(config, workdir=tmp_path, log_dir=tmp_path)
    return McpTool(connection, types.Tool(name=name, input_schema={"type": "object"}))


@pytest.mark.parametrize(
    ("marks", "mode", "asks", "denied"),
    [
        ({}, "ask", True, False),
        ({}, "sandboxed", True, False),  # never "contained": it runs outside the sandbox
        ({}, "allow", False, False),
        ({}, "deny", False, True),
        ({"trust": True}, "ask", False, False),
        ({"trust": ["write"]}, "sandboxed", False, False),
        ({"trust": True}, "deny", False, True),  # trusted, still side-effecting
        ({"trust": ["other"]}, "ask", True, False),
        ({"readOnly": True}, "ask", False, False),
        ({"readOnly": ["write"]}, "deny", False, False),
    ],
)
def test_who_asks(
    tmp_path: Path, marks: dict[str, Any], mode: PermissionMode, asks: bool, denied: bool
) -> None:
    tool = mcp_tool(tmp_path, "write", **marks)
    policy = PermissionPolicy(mode)
    assert (policy.needs_prompt(tool), policy.denied_outright(tool)) == (asks, denied)


def test_the_read_only_mark_is_what_the_journal_records(tmp_path: Path) -> None:
    assert mcp_tool(tmp_path, "read", readOnly=["read"]).read_only
    assert not mcp_tool(tmp_path, "write", readOnly=["read"]).read_only
    assert not mcp_tool(tmp_path, "write", trust=True).read_only
