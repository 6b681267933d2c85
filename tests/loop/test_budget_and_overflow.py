"""One retry budget per model call, and a context overflow that compaction can cure — or not."""

from __future__ import annotations

from pathlib import Path

from drover.core.conversation import ConversationManager
from drover.core.events import Compacted, Retry
from drover.core.messages import TextBlock, assistant_message, user_message
from drover.errors import ContextOverflowError, ProviderHTTPError
from drover.testing.scripted import Reply, ScriptedProvider
from drover.tools.registry import ToolRegistry
from drover.turn.loop import LoopSettings
from drover.turn.state import AgentSession

from .turn_rig import Recorder


def _session(provider: ScriptedProvider, tmp_path: Path, **settings: object) -> AgentSession:
    history = []
    for i in range(12):
        history += [
            user_message(f"question {i} " + "x" * 50),
            assistant_message([TextBlock(text=f"answer {i}")]),
        ]
    return AgentSession(
        provider=provider,
        tools=ToolRegistry([]),
        workdir=tmp_path,
        convo=ConversationManager(system_prompt="sys", messages=history),
        settings=LoopSettings(stream_retry_delay=0.0, **settings),  # type: ignore[arg-type]
    )


async def test_retries_before_and_after_the_stream_share_one_budget(tmp_path: Path) -> None:
    overloaded = ProviderHTTPError(529, "Overloaded")
    provider = ScriptedProvider(
        [
            Reply(error=overloaded),
            Reply(error=overloaded),
            Reply(error=overloaded),
            Reply(text="almost there but", fail_after=3),
            Reply(text="and again cut", fail_after=3),
            Reply(text="never asked for"),
        ]
    )
    session = _session(provider, tmp_path, max_retries=4)
    recorder = Recorder()
    outcome = await session.run("go", recorder)
    # 3 retries before the stream started + 1 after it: the budget of 4 is spent, and the
    # counters did not start again when the stream began.
    assert len(provider.requests) == 5
    assert provider.remaining == 1
    assert outcome.event.type == "incomplete"
    assert "gave up after 5 attempts" in outcome.event.error  # type: ignore[union-attr]
    assert [e.attempt for e in recorder.events if isinstance(e, Retry)] == [1, 2, 3, 4]


async def test_a_context_overflow_compacts_once_and_retries(tmp_path: Path) -> None:
    too_long = ContextOverflowError(400, "prompt is too long: 250000 tokens > 200000 maximum")
    provider = ScriptedProvider(
        [Reply(error=too_long), Reply(text="Summary of what happened."), Reply(text="Fits now.")]
    )
    session = _session(provider, tmp_path)
    recorder = Recorder()
    outcome = await session.run("go", recorder)
    assert outcome.event.type == "done"
    assert any(isinstance(e, Compacted) for e in recorder.events)
    first, summary, retried = provider.requests
    assert len(retried.messages) < len(first.messages)
    assert summary.system != first.system  # the summary request


async def test_an_overflow_compaction_cannot_cure_says_retrying_will_not_help(
    tmp_path: Path,
) -> None:
    too_long = ContextOverflowError(400, "prompt is too long")
    provider = ScriptedProvider(
        [Reply(error=too_long), Reply(text="Summary."), Reply(error=too_long)]
    )
    session = _session(provider, tmp_path)
    outcome = await session.run("go", Recorder())
    assert outcome.event.type == "error"
    assert outcome.event.retryable is False  # type: ignore[union-attr]
    assert "prompt is too long" in outcome.event.error  # type: ignore[union-attr]
    assert session.pending  # the prompt is kept pending: the user decides (discard, compact)
