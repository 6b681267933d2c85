"""Shared pieces of the MCP tests: an agent on the fake LLM server with MCP servers.

The tests that start real servers use the ``node`` fixture: it skips them loudly where Node.js
or the reference servers are missing, and fails them under ``DROVER_REQUIRE_NODE=1`` (CI).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.mcp_servers import require_node

from drover import Agent
from drover.config.settings import Config
from drover.testing import FakeLLMServer

CONFIG = Config(api_keys={"anthropic": "test", "openai": "test", "openai-responses": "test"})


@pytest.fixture
def node() -> None:
    require_node()


def make_agent(
    fake_llm: FakeLLMServer,
    tmp_path: Path,
    servers: dict[str, Any],
    *,
    protocol: str = "anthropic",
    **options: Any,
) -> Agent:
    """An agent with no tools but the MCP servers', its journal in ``tmp_path``."""
    base_url = fake_llm.anthropic_base_url if protocol == "anthropic" else fake_llm.openai_base_url
    return Agent(
        f"{protocol}:test",
        base_url=base_url,
        tools=[],
        store=str(tmp_path / "journal.db"),
        workdir=tmp_path,
        config=CONFIG,
        mcp_servers=servers,
        mcp_log_dir=tmp_path / "mcp-logs",
        **options,
    )


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "input": arguments}
