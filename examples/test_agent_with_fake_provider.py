"""Testing your own agent with drover's scripted provider: no network, no API key.

``ScriptedProvider`` plays the model's replies as real stream events — tool calls, text,
failures mid-answer — and keeps every request, so a test can check what the model was sent::

    python -m pytest examples/test_agent_with_fake_provider.py
"""

from __future__ import annotations

from pathlib import Path

from drover import Agent, ToolContext, tool
from drover.testing.scripted import Reply, ScriptedProvider, call


@tool
async def save(ctx: ToolContext, filename: str, text: str) -> str:
    """Save a text file.

    Args:
        filename: The file name.
        text: Its content.
    """
    (ctx.workdir / filename).write_text(text)
    return "saved"


def test_the_agent_saves_the_file(tmp_path: Path) -> None:
    model = ScriptedProvider(
        [Reply(calls=[call("save", filename="a.txt", text="hi")]), Reply(text="Saved a.txt.")]
    )
    agent = Agent(
        model, tools=[save], store=":memory:", workdir=tmp_path, on_permission=lambda r: "allow"
    )
    result = agent.run_sync("save hi to a.txt")
    assert (result.status, result.text) == ("completed", "Saved a.txt.")
    assert (tmp_path / "a.txt").read_text() == "hi"
    # The tool result went back to the model in the second request.
    assert model.requests[1].messages[-1].tool_results[0].content == "saved"


def test_a_failed_answer_is_kept_and_resumed(tmp_path: Path) -> None:
    model = ScriptedProvider(
        [Reply(text="The answer is", fail_after=4, fail_retryable=False), Reply(text=" 42.")]
    )
    agent = Agent(model, tools=[], store=str(tmp_path / "journal.db"), workdir=tmp_path)
    cut = agent.run_sync("what is the answer?")
    assert cut.status == "incomplete"
    assert cut.pending  # the partial answer is kept in the journal
    done = agent.run_sync("go on", session=cut.session_id)
    assert (done.status, done.pending) == ("completed", ())
    # The resumed request carried the cut-off text before the new prompt.
    assert [m.text for m in model.requests[-1].messages][-2:] == ["The answer is", "go on"]
