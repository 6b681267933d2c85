"""``drover serve --mcp-config``: MCP tools in server turns, and their progress on the SSE stream
as transient events (no ``id:``), which a replay never shows."""

from __future__ import annotations

from pathlib import Path

import pytest
from server.support import clean_env, live_turn, read_events, start_server
from support.mcp_servers import everything, write_config

from drover.testing import FakeLLMServer

from .conftest import call

pytestmark = pytest.mark.usefixtures("node")

LONG = "mcp__everything__trigger-long-running-operation"


def test_progress_reaches_sse_clients_as_transient_events(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    config = write_config(tmp_path / "mcp.json", {"everything": everything(readOnly=True)})
    fake_llm.script({"tool_calls": [call(LONG, duration=0.6, steps=3)]}, {"text": "Finished."})
    env = clean_env(XDG_DATA_HOME=str(tmp_path / "data"))
    served = start_server(fake_llm, tmp_path, "--mcp-config", str(config), env=env)
    try:
        with served.client() as c:
            sid = c.post("/v1/sessions", json={}).json()["id"]
            live = live_turn(c, sid, "go")
            replayed = read_events(c, sid, after=0)
    finally:
        served.close()
    progress = [e for e in live if e.event == "tool_progress"]
    assert progress, [e.event for e in live]
    assert all(e.id is None and e.data["transient"] for e in progress)
    assert all(e.data["name"] == LONG and e.data["total"] == 3 for e in progress)
    assert {e.data["turn_id"] for e in progress} == {live[0].data["turn_id"]}
    assert live[-1].event == "done"
    assert all(e.id is not None for e in live if e.event != "tool_progress")
    assert "tool_progress" not in [e.event for e in replayed]
    numbered = ("tool_progress", "text_delta")  # (a replay coalesces text deltas)
    assert [e.id for e in replayed if e.event not in numbered] == [
        e.id for e in live if e.event not in numbered
    ]
