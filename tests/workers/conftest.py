"""Pieces for worker tests: one fake LLM server per worker (so each worker follows its own
script whatever order the parallel workers call in), a provider routing each request to the
server of the worker that made it, and a session over a real SQLite journal."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from support import pg

from drover.core.conversation import ConversationManager
from drover.core.events import Event, PermissionRequest, WorkerEvent
from drover.core.messages import TextBlock
from drover.core.model_stream import ModelRequest, StreamEvent
from drover.core.sinks import EventRecorder
from drover.journal.protocol import Store
from drover.providers.anthropic import AnthropicProvider
from drover.providers.base import Provider
from drover.providers.openai_chat import OpenAIChatProvider
from drover.providers.openai_responses import OpenAIResponsesProvider
from drover.runtime.runner import Runner
from drover.runtime.workers import Coordinator, WorkerSettings, add_task_tool
from drover.store.postgres.store import PostgresStore
from drover.store.sqlite.store import SqliteStore
from drover.testing.server import FakeLLMServer
from drover.tools.registry import ToolRegistry, default_registry
from drover.turn.loop import LoopSettings
from drover.turn.permissions import PermissionPolicy
from drover.turn.state import AgentSession

PROTOCOLS = ("anthropic", "openai", "openai-responses")
SETTINGS = LoopSettings(stream_retry_delay=0.0, compaction=False)


def make_provider(protocol: str, server: FakeLLMServer) -> Provider:
    if protocol == "anthropic":
        return AnthropicProvider(
            "claude-test", api_key="k", base_url=server.anthropic_base_url, backoff_base=0.001
        )
    if protocol == "openai":
        return OpenAIChatProvider(
            "gpt-test", api_key="k", base_url=server.openai_base_url, backoff_base=0.001
        )
    # The whole history in every request: a worker's seed holds response ids of another server.
    return OpenAIResponsesProvider(
        "gpt-test", api_key="k", base_url=server.openai_base_url, store=False, backoff_base=0.001
    )


def marker(worker: int) -> str:
    return f"[W{worker}]"


class Routed:
    """A provider that sends a request to the provider of the worker whose marker appears
    in the request's user text, and any other request to the parent's."""

    def __init__(self, parent: Provider, workers: Sequence[Provider]) -> None:
        self.parent = parent
        self.workers = list(workers)

    @property
    def name(self) -> str:
        return self.parent.name

    @property
    def model(self) -> str:
        return self.parent.model

    def _pick(self, request: ModelRequest) -> Provider:
        for message in request.messages:
            if message.role != "user":
                continue
            for block in message.content:
                if isinstance(block, TextBlock):
                    for i, provider in enumerate(self.workers):
                        if marker(i) in block.text:
                            return provider
        return self.parent

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamEvent, None]:
        async for event in self._pick(request).stream(request):
            yield event

    async def aclose(self) -> None:
        for provider in (self.parent, *self.workers):
            await provider.aclose()


@pytest.fixture(params=PROTOCOLS)
def protocol(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def worker_servers() -> Iterator[list[FakeLLMServer]]:
    servers = [FakeLLMServer() for _ in range(3)]
    for server in servers:
        server.start()
    try:
        yield servers
    finally:
        for server in servers:
            server.stop()
    for i, server in enumerate(servers):
        assert not server.violations, (i, server.violations)
        assert not server.unexpected, (i, server.unexpected)


class Watcher(EventRecorder):
    """Records events, allows every permission request, and signals what tests wait for."""

    def __init__(self, *, answer: bool = True) -> None:
        super().__init__()
        self.answer = answer
        self.changed = asyncio.Event()

    async def send(self, event: Event) -> None:
        await super().send(event)
        if isinstance(event, PermissionRequest) and self.answer:
            event.decide("allow")
        self.changed.set()

    def requests(self) -> list[PermissionRequest]:
        return [e for e in self.events if isinstance(e, PermissionRequest)]

    def worker_events(self) -> list[WorkerEvent]:
        return [e for e in self.events if isinstance(e, WorkerEvent)]

    async def wait_for(self, predicate: Any) -> None:
        """Wait until ``predicate(self)`` holds (30 s bounds a failure)."""
        async with asyncio.timeout(30):
            while not predicate(self):
                self.changed.clear()
                await self.changed.wait()


@dataclass
class Rig:
    path: Path
    store: Store
    provider: Routed
    coordinator: Coordinator
    session_id: str = ""
    tools: ToolRegistry = field(default_factory=default_registry)

    async def session(self) -> AgentSession:
        record = await self.store.get_session(self.session_id)
        assert record is not None
        session = await Runner(self.store).agent_session(
            record,
            provider=self.provider,
            tools=self.tools,
            workdir=self.path,
            policy=PermissionPolicy("allow"),
            settings=SETTINGS,
            convo=ConversationManager(system_prompt="You are a test."),
        )
        session.prelude = self.coordinator.resume
        return session


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[pg.PgCluster]:
    with pg.cluster() as cluster:
        yield cluster


@pytest.fixture
def pg_url(pg_cluster: pg.PgCluster) -> str:
    """An empty schema of its own, which the store migrates."""
    return pg_cluster.new_schema(pg_cluster.new_database())


@pytest.fixture
def store_backend() -> str:
    """The journal's backend; a test parametrizes it to run on PostgreSQL."""
    return "sqlite"


@pytest.fixture
async def rig(
    tmp_path: Path,
    protocol: str,
    fake_llm: FakeLLMServer,
    worker_servers: list[FakeLLMServer],
    store_backend: str,
    request: pytest.FixtureRequest,
) -> AsyncIterator[Rig]:
    work = tmp_path / "work"
    work.mkdir()
    for i in range(3):
        (work / f"f{i}.txt").write_text(f"content of file {i}\n")
    store: Store
    if store_backend == "postgres":
        store = PostgresStore(str(request.getfixturevalue("pg_url")))
    else:
        store = SqliteStore(tmp_path / "drover.db")
    await store.open()
    provider = Routed(
        make_provider(protocol, fake_llm), [make_provider(protocol, s) for s in worker_servers]
    )
    coordinator = Coordinator(store, WorkerSettings(max_turns=4))
    rig = Rig(work, store, provider, coordinator)
    add_task_tool(rig.tools, coordinator)
    record = await store.create_session(workdir=str(work), model="test:m")
    rig.session_id = record.id
    try:
        yield rig
    finally:
        await provider.aclose()
        await store.close()
