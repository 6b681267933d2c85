"""The model API through an HTTP proxy named by the environment, on both SDK clients.

A user behind a proxy sets ``HTTP_PROXY``/``HTTPS_PROXY`` and ``NO_PROXY``. The SDKs' httpx
client reads them when it is built (``trust_env``) and mounts one transport per proxy; their
aiohttp client is an httpx client too, whose proxy transport hands the proxy to aiohttp. These
tests send a streamed turn through a real forward proxy (:class:`.proxy.ForwardProxy`) on each
client and protocol, bypass it with ``NO_PROXY``, and point at a proxy that refuses connections.

Every test clears the proxy variables first, so the machine's environment cannot change what
it sees, and builds its provider only after setting them.
"""

from __future__ import annotations

import asyncio

import pytest
from support.ports import free_port

from drover.core.model_stream import BlockDelta, StreamEnd
from drover.errors import ProviderConnectionError
from drover.testing.server import FakeLLMServer

from .conftest import BOUND, ON_BOTH_CLIENTS, drain, make_provider, request, turns
from .proxy import ForwardProxy, unset_proxy_vars

pytestmark = ON_BOTH_CLIENTS

#: The protocols' model API paths, as the proxy sees them in the request line.
API_PATHS = {
    "anthropic": "/v1/messages",
    "openai": "/v1/chat/completions",
    "openai-responses": "/v1/responses",
}

TEXT = "Through the proxy, every word. " * 4


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """``monkeypatch`` with every proxy variable, upper- and lowercase, unset."""
    unset_proxy_vars(monkeypatch)
    return monkeypatch


@pytest.mark.parametrize("variable", ["HTTP_PROXY", "http_proxy", "ALL_PROXY"])
async def test_a_streamed_turn_goes_through_the_proxy(
    protocol: str,
    http_client: str,
    variable: str,
    fake_llm: FakeLLMServer,
    proxy: ForwardProxy,
    clean_env: pytest.MonkeyPatch,
) -> None:
    clean_env.setenv(variable, proxy.url)
    provider = make_provider(protocol, fake_llm, http_client=http_client)
    fake_llm.script({"text": TEXT}, {"text": "again"})
    first, second = await turns(provider, 2)
    deltas = [e for e in first.events if isinstance(e, BlockDelta) and e.kind == "text"]
    assert len(deltas) > 1 and "".join(d.data for d in deltas) == TEXT
    assert isinstance(first.events[-1], StreamEnd) and first.events[-1].stop_reason == "end_turn"
    assert (first.message.text, second.message.text) == (TEXT, "again")
    target = f"{fake_llm.base_url}{API_PATHS[protocol]}"
    assert proxy.request_lines == [f"POST {target} HTTP/1.1"] * 2
    assert len(fake_llm.requests) == 2


async def test_no_proxy_naming_the_host_bypasses_the_proxy(
    protocol: str,
    http_client: str,
    fake_llm: FakeLLMServer,
    proxy: ForwardProxy,
    clean_env: pytest.MonkeyPatch,
) -> None:
    clean_env.setenv("HTTP_PROXY", proxy.url)
    clean_env.setenv("NO_PROXY", fake_llm.host)
    provider = make_provider(protocol, fake_llm, http_client=http_client)
    fake_llm.script({"text": TEXT})
    (outcome,) = await turns(provider, 1)
    assert outcome.message.text == TEXT
    assert proxy.request_lines == []
    assert len(fake_llm.requests) == 1


async def test_a_proxy_that_refuses_is_the_error_of_a_refused_connection(
    protocol: str, http_client: str, fake_llm: FakeLLMServer, clean_env: pytest.MonkeyPatch
) -> None:
    port = free_port()
    # What this client reports for a server that refuses, without a proxy…
    direct = make_provider(
        protocol,
        fake_llm,
        max_retries=1,
        base_url=f"http://127.0.0.1:{port}",
        http_client=http_client,
    )
    # …and for a proxy that refuses, the model API's own server being up.
    clean_env.setenv("HTTP_PROXY", f"http://127.0.0.1:{port}")
    proxied = make_provider(protocol, fake_llm, max_retries=1, http_client=http_client)
    try:
        async with asyncio.timeout(BOUND):
            refused = await drain(direct, request())
            outcome = await drain(proxied, request())
    finally:
        await direct.aclose()
        await proxied.aclose()
    # The same error, word for word: the proxy and the server refused on the same port.
    error = outcome.error
    assert isinstance(error, ProviderConnectionError) and error.retryable
    assert type(error) is type(refused.error) and str(error) == str(refused.error)
    assert len(outcome.retries) == 1 and outcome.events == outcome.retries
    assert fake_llm.requests == []
