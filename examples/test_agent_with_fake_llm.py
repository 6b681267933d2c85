"""Testing your agent through the real SDK and wire protocol: drover's fake LLM server.

The ``fake_llm`` fixture (drover's pytest plugin, installed with drover) is a local server that
speaks the Anthropic, Chat Completions and Responses streaming APIs byte for byte and fails on
cue. At the end of each test it fails the test if a request broke a history rule the real API
enforces, or found no scripted reply left::

    python -m pytest examples/test_agent_with_fake_llm.py
"""

from __future__ import annotations

from pathlib import Path

from drover import Agent
from drover.testing import FakeLLMServer


def test_an_api_failure_mid_answer_is_kept_and_resumed(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.script(
        {"text": "Let me look.", "tool_calls": [{"name": "glob", "input": {"pattern": "*"}}]},
        # The API fails mid-answer with an error no new attempt can fix.
        {"text": "The files are", "error_after": 5, "error": {"type": "invalid_request_error"}},
        {"text": "There is one file: notes.txt."},
    )
    (tmp_path / "notes.txt").write_text("hello\n")
    agent = Agent(
        "anthropic:claude-sonnet-4-5",
        base_url=fake_llm.base_url,
        store=str(tmp_path / "journal.db"),
        workdir=tmp_path,
    )
    cut = agent.run_sync("what is here?")
    assert (cut.status, cut.reason) == ("incomplete", "error")
    done = agent.run_sync("go on", session=cut.session_id)
    assert (done.status, done.text) == ("completed", "There is one file: notes.txt.")
    # The resumed request carried the kept work before the new message: the glob's result
    # (notes.txt) and the cut-off text.
    sent = str(fake_llm.requests[-1].body["messages"])
    assert sent.index("notes.txt") < sent.index("The files") < sent.index("go on")
