"""The SDKs' HTTP client: httpx (their default) or their aiohttp client (``http_client``).

Which one a request went through is seen on aiohttp's side: every request the SDKs' aiohttp
client sends goes through ``aiohttp.ClientSession.request``, counted here around the real
method (the request itself is sent as usual). The behaviours both clients must share (events,
errors, drops, stalls, cancellation) run on both in ``test_streaming.py`` and ``test_stall.py``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import aiohttp
import pytest

from drover.config.settings import Config
from drover.errors import ConfigError
from drover.providers import factory
from drover.providers.factory import create_provider, server_config
from drover.testing.server import FakeLLMServer

from .conftest import PROTOCOLS, collect, request


@pytest.fixture
def aiohttp_requests(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The URLs requested through aiohttp while the test runs."""
    seen: list[str] = []
    real = aiohttp.ClientSession.request

    def counted(session: aiohttp.ClientSession, method: str, url: Any, **kwargs: Any) -> Any:
        seen.append(str(url))
        return real(session, method, url, **kwargs)

    monkeypatch.setattr(aiohttp.ClientSession, "request", counted)
    return seen


def _config(protocol: str, server: FakeLLMServer, http_client: str | None) -> Config:
    base = server.anthropic_base_url if protocol == "anthropic" else server.openai_base_url
    return Config(base_urls={protocol: base}, http_client=http_client)


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize(("http_client", "through_aiohttp"), [("httpx", 0), ("aiohttp", 2)])
async def test_the_configured_client_sends_every_request(
    protocol: str,
    http_client: str,
    through_aiohttp: int,
    fake_llm: FakeLLMServer,
    aiohttp_requests: list[str],
) -> None:
    provider = create_provider(f"{protocol}:m", _config(protocol, fake_llm, http_client))
    fake_llm.script({"text": "one"}, {"text": "two"})
    try:
        first = await collect(provider, request())
        second = await collect(provider, request())  # the pooled connection, again
    finally:
        await provider.aclose()
    assert (first.message.text, second.message.text) == ("one", "two")
    assert len(aiohttp_requests) == through_aiohttp
    assert len(fake_llm.requests) == 2


def test_drover_serve_takes_aiohttp_unless_the_config_names_a_client() -> None:
    assert server_config(Config()).http_client == "aiohttp"
    assert server_config(Config(http_client="httpx")).http_client == "httpx"
    # Everything else keeps the SDKs' default: the config's None is httpx.
    assert Config().http_client is None


def test_drover_serve_keeps_httpx_where_aiohttp_is_not_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # (aiohttp is installed here; a machine without it can only be pretended.)
    monkeypatch.setattr(factory, "aiohttp_installed", lambda: False)
    assert server_config(Config()).http_client is None


async def test_aiohttp_asked_for_without_it_installed_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(factory, "aiohttp_installed", lambda: False)
    config = replace(Config(api_keys={"anthropic": "k"}), http_client="aiohttp")
    with pytest.raises(ConfigError, match=r"needs the aiohttp package: pip install"):
        create_provider("anthropic:m", config)
