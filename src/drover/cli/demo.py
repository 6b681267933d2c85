"""``drover demo``: a real tool-using turn that breaks, then resumes — with or without a key.

With no ``ANTHROPIC_API_KEY`` the demo runs against drover's own fake LLM server, following a
scripted scenario: the model lists the files and writes notes, then the API fails mid-answer
until the retries run out. The turn ends ``incomplete`` with every tool output kept in the
journal, and the demo resumes it without a new instruction. With a key, the same task goes to
the real API (the resume step only runs if the real turn does not complete).

The demo works in a fresh temporary directory (or ``--workdir``) and offers no ``bash`` tool.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from importlib import resources
from pathlib import Path

from drover.agent.agent import Agent
from drover.cli.render import HeadlessPrinter
from drover.config.settings import load_config
from drover.core.sinks import EventSink
from drover.providers.anthropic import AnthropicProvider
from drover.providers.base import Provider
from drover.testing.scenario import load_scenario
from drover.testing.server import FakeLLMServer
from drover.tools.base import Tool
from drover.tools.registry import default_registry

DEMO_PROMPT = (
    "Look at the files in this directory and write a short notes.txt summarising them, "
    "then tell me what you wrote."
)
SAMPLE_FILES = {
    "README.md": "# Lighthouse\nA tiny service that reports whether the harbour lights are on.\n",
    "TODO.txt": "- add a health check\n- log lamp failures\n- write the operator guide\n",
    "lamp.py": "def lamp_on(level: float) -> bool:\n    return level > 0.2\n",
}


def _say(text: str) -> None:
    print(f"\n── {text}", file=sys.stderr, flush=True)


def _demo_tools() -> list[Tool]:
    full = default_registry()
    return [tool for name in full.names() if name != "bash" and (tool := full.get(name))]


def _prepare_workdir(requested: Path | None) -> tuple[Path, Path]:
    """The demo project and, beside it (not inside, where the tools would see it), the journal."""
    if requested is None:
        base = Path(tempfile.mkdtemp(prefix="drover-demo-"))
        workdir, db = base / "lighthouse", base / "journal.db"
    else:
        workdir, db = requested, requested.parent / f"{requested.name}.drover-demo.db"
    workdir.mkdir(parents=True, exist_ok=True)
    for name, text in SAMPLE_FILES.items():
        path = workdir / name
        if not path.exists():
            path.write_text(text, encoding="utf-8")
    return workdir, db


async def run_demo(args: argparse.Namespace) -> int:
    workdir, default_db = _prepare_workdir(args.workdir)
    db = args.db or str(default_db)
    config = load_config()
    server: FakeLLMServer | None = None
    provider: Provider | None = None
    model: str | None = None
    if not os.environ.get("ANTHROPIC_API_KEY"):
        scenario_file = resources.files("drover.testing") / "scenarios" / "demo.yaml"
        with resources.as_file(scenario_file) as path:
            server = FakeLLMServer(load_scenario(path))
        server.start()
        model = "anthropic:scripted-demo"
        provider = AnthropicProvider(model, api_key="fake-key", base_url=server.base_url)
        _say(f"no ANTHROPIC_API_KEY: using drover's scripted fake LLM server at {server.base_url}")
    try:
        agent = Agent(
            provider or model,
            store=db,
            workdir=workdir,
            permission_mode="allow",
            tools=_demo_tools(),
            config=config,
        )
        async with agent:
            session = await agent.session()
            _say(f"session {session.id} in {workdir}")
            _say(f"turn 1: {DEMO_PROMPT}")
            live: list[EventSink] = [HeadlessPrinter(output_format="text")]
            result = await session.run(DEMO_PROMPT, live=live)
            if not result.completed:
                kept = sum(len(m.tool_results) for m in session.pending)
                _say(
                    f"turn 1 ended {result.status}; nothing was lost: {len(session.pending)} "
                    f"messages with {kept} tool outputs are pending in {db}"
                )
                _say("turn 2: resuming the unfinished turn, with no new instruction")
                result = await session.resume(live=live)
            _say(
                f"final status: {result.status}. Inspect it with: drover show {session.id} "
                f"--db {db}"
            )
            return 0 if result.completed else 1
    finally:
        if provider is not None:
            await provider.aclose()
        if server is not None:
            server.stop()
