"""drover behind the real LiteLLM proxy, in front of drover's fake model, on all three protocols,
configured as ``docs/gateways.md`` says (both configurations are read from the page).

* An overload upstream part-way through an answer — which LiteLLM reports in its own words on
  each route (an error chunk with ``"code": "500"`` and no type, or ``internal_server_error``,
  on Chat Completions; ``response.failed`` with ``server_error`` on Responses; ``api_error`` or
  the upstream's ``overloaded_error`` on Messages) — is streamed anew and the turn completes.
* ``chain = false``: the Responses bridge to an Anthropic model gets the earlier turn, which
  LiteLLM drops when the request is chained with ``previous_response_id``.
* Retries multiply as the page counts them.
* LiteLLM's key in a header of its own (``x-litellm-api-key``), sent by ``--header`` as the
  page's command line does.

One proxy (it takes ~10 s to start) and one fake upstream serve the whole module; each test
starts and ends with an empty script and checks only its own requests.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx2
import pytest
import yaml
from cli.helpers import clean_env, run_drover
from support.litellm import (
    MASTER_KEY,
    PAGE,
    LiteLLM,
    aimed_at,
    documented_blocks,
    start_litellm,
)

from drover.config.settings import Config, load_config
from drover.core.events import Done, Error, Retry
from drover.core.sinks import EventRecorder
from drover.providers.factory import create_provider
from drover.testing.app import RecordedRequest
from drover.testing.server import FakeLLMServer
from drover.tools.registry import ToolRegistry
from drover.turn.loop import LoopSettings
from drover.turn.permissions import PermissionPolicy
from drover.turn.state import AgentSession

#: Where the page's drover config expects the proxy.
DOC_PROXY = "http://localhost:4000"
CUT_SHORT = {
    "text": "Hello there, a longer answer cut short.",
    "error_after": 6,
    "error": {"type": "overloaded_error", "message": "Overloaded"},
}


@dataclass
class Upstream:
    """The module's fake model, as one test sees it: the requests since the test began."""

    server: FakeLLMServer
    first: int

    @property
    def requests(self) -> list[RecordedRequest]:
        return self.server.requests[self.first :]

    def script(self, *responses: dict[str, object]) -> None:
        self.server.script(*responses)


@pytest.fixture(scope="module")
def upstream_server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as server:
        yield server


@pytest.fixture(scope="module")
def gateway(
    upstream_server: FakeLLMServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiteLLM]:
    (proxy_config,) = documented_blocks("LiteLLM", "yaml")
    config = aimed_at(yaml.safe_load(proxy_config), upstream_server)
    proxy = start_litellm(tmp_path_factory.mktemp("litellm"), config)
    try:
        yield proxy
    finally:
        proxy.stop()


@pytest.fixture
def upstream(upstream_server: FakeLLMServer) -> Iterator[Upstream]:
    """The fake model for one test; it must leave nothing scripted and see only requests a
    real API would take."""
    violations, unexpected = len(upstream_server.violations), len(upstream_server.unexpected)
    yield Upstream(upstream_server, len(upstream_server.requests))
    left = upstream_server.remaining
    while upstream_server.remaining:  # (so that the next test starts afresh)
        body = {"model": "drain", "messages": [{"role": "user", "content": "drain"}]}
        httpx2.post(f"{upstream_server.openai_base_url}/chat/completions", json=body, timeout=30)
    assert left == 0, f"the test left {left} scripted responses unused"
    assert upstream_server.violations[violations:] == []
    assert upstream_server.unexpected[unexpected:] == []


def drover_config(tmp_path: Path, gateway: LiteLLM, *, chain: bool = True) -> Path:
    """The page's drover config file, aimed at the test's proxy (``chain`` True: without its
    ``[providers.openai-responses]`` table, as drover is without it)."""
    (text,) = documented_blocks("LiteLLM", "toml")
    assert text.count(DOC_PROXY) == 3, f"the documented config must name {DOC_PROXY} thrice"
    text = text.replace(DOC_PROXY, gateway.base_url)
    if chain:
        table = "[providers.openai-responses]\nchain = false\n"
        assert text.count(table) == 1
        text = text.replace(table, "")
    path = tmp_path / "config.toml"
    path.write_text(text, encoding="utf-8")
    return path


def config_for(tmp_path: Path, gateway: LiteLLM, *, chain: bool = False) -> Config:
    keys = {"ANTHROPIC_API_KEY": MASTER_KEY, "OPENAI_API_KEY": MASTER_KEY}
    return load_config(drover_config(tmp_path, gateway, chain=chain), env=keys)


async def turn(session: AgentSession, prompt: str) -> tuple[object, list[object]]:
    sink = EventRecorder()
    outcome = await session.run(prompt, sink)
    return outcome.event, list(sink.events)


def new_session(config: Config, spec: str, tmp_path: Path) -> AgentSession:
    """A session on ``spec`` as ``config`` sets it up (its ``[retries]`` too), with no wait
    between the loop's retries of a stream that failed part-way."""
    return AgentSession(
        provider=create_provider(spec, config),
        tools=ToolRegistry([]),
        workdir=tmp_path,
        policy=PermissionPolicy("allow"),
        settings=LoopSettings(stream_retry_delay=0.0, max_retries=config.retries_max),
    )


@pytest.mark.parametrize(
    "spec",
    [
        "openai:gpt-4.1",
        "openai:claude-sonnet-4-5",
        "anthropic:claude-sonnet-4-5",
        "openai-responses:gpt-4.1",
    ],
)
async def test_an_overload_upstream_part_way_is_streamed_anew_and_the_turn_completes(
    gateway: LiteLLM, upstream: Upstream, tmp_path: Path, spec: str
) -> None:
    upstream.script(CUT_SHORT, {"text": "The whole answer."})
    session = new_session(config_for(tmp_path, gateway), spec, tmp_path)
    try:
        event, events = await turn(session, "hello")
    finally:
        await session.provider.aclose()
    assert isinstance(event, Done), event
    assert event.text == "The whole answer."
    retries = [e for e in events if isinstance(e, Retry)]
    assert len(retries) == 1 and retries[0].discard_partial, retries
    # LiteLLM passed the first answer's start on, so only drover could try again.
    assert len(upstream.requests) == 2


@pytest.mark.parametrize("chain", [False, True], ids=["chain-false", "chained"])
async def test_chain_false_keeps_the_earlier_turn_on_the_responses_bridge(
    gateway: LiteLLM, upstream: Upstream, tmp_path: Path, chain: bool
) -> None:
    upstream.script({"text": "First answer."}, {"text": "Second answer."})
    config = config_for(tmp_path, gateway, chain=chain)
    session = new_session(config, "openai-responses:claude-sonnet-4-5", tmp_path)
    try:
        first, _ = await turn(session, "turn one")
        second, _ = await turn(session, "turn two")
    finally:
        await session.provider.aclose()
    assert isinstance(first, Done) and isinstance(second, Done)
    # What the Anthropic model upstream was asked the second time.
    sent = json.dumps(upstream.requests[1].body["messages"])
    assert "turn two" in sent
    if chain:
        # LiteLLM took previous_response_id and forgot what it pointed at.
        assert "turn one" not in sent and "First answer." not in sent
    else:
        assert "turn one" in sent and "First answer." in sent


async def test_retries_multiply_as_the_page_counts(
    gateway: LiteLLM, upstream: Upstream, tmp_path: Path
) -> None:
    config = config_for(tmp_path, gateway)
    expected = (config.retries_max + 1) * 3
    assert f"makes {expected} upstream requests through LiteLLM" in PAGE.read_text()
    overloaded = {"http_error": {"status": 529, "type": "overloaded_error", "retry_after": 0}}
    upstream.script(*[overloaded] * expected)
    session = new_session(config, config.default_model, tmp_path)
    try:
        event, events = await turn(session, "hello")
    finally:
        await session.provider.aclose()
    assert isinstance(event, Error), event  # nothing was kept: failed
    assert len(upstream.requests) == expected  # and the fixture: not one more
    assert len([e for e in events if isinstance(e, Retry)]) == config.retries_max


def test_litellms_key_in_a_header_of_its_own_as_the_page_runs_it(
    gateway: LiteLLM, upstream: Upstream, tmp_path: Path
) -> None:
    (command,) = documented_blocks("LiteLLM", "sh")
    argv = shlex.split(command)
    assert argv[:3] == ["drover", "-p", "…"] and "--header" in argv
    upstream.script({"text": "Through the header."})
    env = clean_env(
        DROVER_CONFIG=str(drover_config(tmp_path, gateway)),
        # Something in front of LiteLLM would take these: not LiteLLM's key.
        ANTHROPIC_API_KEY="a-key-for-someone-else",
        LITELLM_KEY=MASTER_KEY,
    )
    args = [*argv[1:], "--db", str(tmp_path / "journal.db"), "--workdir", str(tmp_path)]
    done = run_drover(args, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "Through the header.\n"
    assert MASTER_KEY not in done.stdout + done.stderr
    assert len(upstream.requests) == 1
