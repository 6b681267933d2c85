"""Fixtures of the server tests: ``serve`` starts a real ``drover serve`` on the fake LLM,
``proxied`` one behind a real nginx, ``sdk`` an OpenAI client of a server's ``/v1``; ``pg_url`` is
a PostgreSQL journal of the test's own (one throwaway cluster for the run, started by the first
test that asks)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import openai
import pytest
from support.pg import pg_cluster, pg_database, pg_url

from drover.testing.server import FakeLLMServer

from .nginx import PUBLIC_NAME, Proxied, certificates, nginx_binary, start_nginx
from .support import Served, clean_env, servers, start_server

__all__ = ["pg_cluster", "pg_database", "pg_url"]  # (fixtures, shared with the store suite)


@pytest.fixture
def serve(fake_llm: FakeLLMServer, tmp_path: Path) -> Iterator[Callable[..., Served]]:
    """``serve(*flags)`` starts a server (stopped at teardown, SIGKILL if SIGTERM hangs)."""
    with servers(fake_llm, tmp_path) as start:
        yield start


@pytest.fixture
def proxied(fake_llm: FakeLLMServer, tmp_path: Path) -> Iterator[Callable[..., Proxied]]:
    """``proxied(*flags, read_timeout=None, public=True, prefix=None)``: a server (whose model
    streams may stall as long as a test needs; ``--allowed-host`` for the public name unless
    ``public`` is false) behind nginx with the documented config, ``proxy_read_timeout``
    replaced when given, under the path ``prefix`` when given; both stopped at teardown, each
    by its own pid."""
    nginx_binary()  # skips (or fails) before anything starts when nginx is missing
    started: list[Proxied] = []

    def start(
        *flags: str, read_timeout: str | None = None, public: bool = True, prefix: str | None = None
    ) -> Proxied:
        n = len(started)
        root = tmp_path / f"proxy{n}"
        root.mkdir()
        if public:
            flags = ("--allowed-host", PUBLIC_NAME, *flags)
        served = start_server(fake_llm, root, *flags, env=clean_env(DROVER_STALL_TIMEOUT="600"))
        try:
            ca, cert, key = certificates(root)
            upstream = served.url.removeprefix("http://").rstrip("/")
            nginx = start_nginx(
                root / "nginx", upstream, cert, key, read_timeout=read_timeout, prefix=prefix
            )
        except BaseException:
            served.close()
            raise
        started.append(Proxied(served=served, nginx=nginx, ca=ca))
        return started[-1]

    yield start
    for proxy in started:
        proxy.close()


@pytest.fixture
def sdk() -> Iterator[Callable[[Served], openai.OpenAI]]:
    """``sdk(server)``: an OpenAI client of the server's ``/v1`` (closed at teardown)."""
    clients: list[openai.OpenAI] = []

    def make(server: Served) -> openai.OpenAI:
        clients.append(openai.OpenAI(base_url=f"{server.url}/v1", api_key="-", max_retries=0))
        return clients[-1]

    yield make
    for client in clients:
        client.close()
