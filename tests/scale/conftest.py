"""Fixtures of the scale-out tests, shared per module (starting servers is what costs):
one throwaway PostgreSQL cluster, one Redis, one fake LLM server, and ``drover serve``
processes on one journal (a schema of their own per module)."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from server.support import Served, start_server
from support import pg
from support import redis as redis_support

from drover.testing.server import FakeLLMServer

#: Short leases: a killed process's turn is taken over within about a second.
LEASE = "1.5"


@pytest.fixture(scope="module")
def pg_cluster() -> Iterator[pg.PgCluster]:
    with pg.cluster() as cluster:
        yield cluster


@pytest.fixture(scope="module")
def redis_server() -> Iterator[redis_support.RedisServer]:
    with redis_support.server() as server:
        yield server


@pytest.fixture(scope="module")
def journal_url(pg_cluster: pg.PgCluster) -> str:
    return pg_cluster.new_schema(pg_cluster.new_database())


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeLLMServer]:
    server = FakeLLMServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def spawn(
    fake: FakeLLMServer,
    journal_url: str,
    redis_server: redis_support.RedisServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[..., Served]]:
    """``spawn(redis=True, *flags)``: a ``drover serve`` on the shared journal (stopped at the
    end of the module, SIGKILL if SIGTERM hangs)."""
    tmp: Path = tmp_path_factory.mktemp("scale")
    started: list[Served] = []

    def start(*flags: str, redis: bool = True) -> Served:
        extra = ["--db", journal_url, "--lease", LEASE, "--sandbox", "off", *flags]
        if redis:
            extra += ["--redis", redis_server.url]
        served = start_server(fake, tmp, *extra)
        started.append(served)
        return served

    yield start
    for served in started:  # all at once: each takes a moment to stop
        if served.proc.poll() is None:
            served.proc.send_signal(signal.SIGTERM)
    for served in started:
        served.close()
