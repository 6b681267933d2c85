"""The model API through an HTTP proxy named by the environment, on both SDK clients.

A user behind a proxy sets ``HTTP_PROXY``/``HTTPS_PROXY`` and ``NO_PROXY``. The SDKs' httpx
client reads them when it is built (``trust_env``) and mounts one transport per proxy; their
aiohttp client is an httpx client too, whose proxy transport hands the proxy to aiohttp. These
tests send a streamed turn through a real forward proxy (:class:`ForwardProxy`) on each client
and protocol, bypass it with ``NO_PROXY``, and point at a proxy that refuses connections.

Every test clears the proxy variables first, so the machine's environment cannot change what
it sees, and builds its provider only after setting them.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import pytest

from drover.errors import ProviderConnectionError
from drover.model_stream import BlockDelta, StreamEnd
from drover.providers.base import Provider
from drover.testing.server import FakeLLMServer

from .conftest import ON_BOTH_CLIENTS, Outcome, collect, drain, make_provider, request

pytestmark = ON_BOTH_CLIENTS

#: The protocols' model API paths, as the proxy sees them in the request line.
API_PATHS = {
    "anthropic": "/v1/messages",
    "openai": "/v1/chat/completions",
    "openai-responses": "/v1/responses",
}

PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")

TEXT = "Through the proxy, every word. " * 4

#: The failure bound of a test whose request must end on its own (it takes milliseconds).
BOUND = 20.0


class ForwardProxy:
    """A forward proxy for plain HTTP on 127.0.0.1: one request per client connection.

    It reads a request's head, takes the target from its absolute-form request line
    (``POST http://127.0.0.1:PORT/v1/messages HTTP/1.1``), connects to it and sends the head on
    in origin form (``POST /v1/messages HTTP/1.1``) — the fake server, like most origin
    servers, routes only that — with ``Connection: close``, then relays both directions as the
    bytes come (a streamed answer passes through event by event) until either side closes.
    ``Connection: close`` makes the server close after its answer and tells the client not to
    send another request on the connection, so a proxy that rewrites only a connection's
    first request line sees every request.
    """

    def __init__(self) -> None:
        #: Each request line received, as the client sent it.
        self.request_lines: list[str] = []
        self._server: asyncio.Server | None = None
        #: Each open client connection's writer, and the task serving it.
        self._connections: dict[asyncio.StreamWriter, asyncio.Task[None]] = {}

    @property
    def url(self) -> str:
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def __aenter__(self) -> ForwardProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        # Closing a client connection ends its task (its reads see the end); cancelling the
        # task instead would have asyncio's server log the cancellation as an error.
        for writer in self._connections:
            writer.close()
        await asyncio.gather(*self._connections.values())
        await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections[writer] = task
        try:
            await self._forward(reader, writer)
        finally:
            del self._connections[writer]
            writer.close()

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return  # the client went away before sending a request
        line, _, fields = head.decode("latin-1").partition("\r\n")
        self.request_lines.append(line)
        method, target, version = line.split(" ")
        url = urlsplit(target)
        assert url.hostname is not None and url.port is not None, line
        origin = url.path + (f"?{url.query}" if url.query else "")
        kept = [
            f
            for f in fields.split("\r\n")
            if f and f.split(":", 1)[0].lower() not in ("connection", "proxy-connection")
        ]
        upstream = "\r\n".join([f"{method} {origin} {version}", *kept, "Connection: close"])
        server_reader, server_writer = await asyncio.open_connection(url.hostname, url.port)
        try:
            server_writer.write(f"{upstream}\r\n\r\n".encode("latin-1"))
            # The rest of the request (its body) follows, then whatever either side sends.
            relays = [
                asyncio.create_task(_relay(reader, server_writer)),
                asyncio.create_task(_relay(server_reader, writer)),
            ]
            try:
                await asyncio.wait(relays, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for relay in relays:
                    relay.cancel()
                await asyncio.gather(*relays, return_exceptions=True)
        finally:
            server_writer.close()


async def _relay(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    """Copies ``source`` to ``sink`` as the bytes arrive, until ``source`` ends."""
    with contextlib.suppress(ConnectionError):
        while chunk := await source.read(65536):
            sink.write(chunk)
            await sink.drain()


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """``monkeypatch`` with every proxy variable, upper- and lowercase, unset."""
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    return monkeypatch


@pytest.fixture
async def proxy() -> AsyncIterator[ForwardProxy]:
    async with ForwardProxy() as running:
        yield running


async def _turns(provider: Provider, count: int) -> list[Outcome]:
    """``count`` turns on ``provider``, one after the other, each of which must succeed; the
    provider is closed after them."""
    try:
        async with asyncio.timeout(BOUND):
            return [await collect(provider, request()) for _ in range(count)]
    finally:
        await provider.aclose()


def _closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


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
    first, second = await _turns(provider, 2)
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
    (outcome,) = await _turns(provider, 1)
    assert outcome.message.text == TEXT
    assert proxy.request_lines == []
    assert len(fake_llm.requests) == 1


async def test_a_proxy_that_refuses_is_the_error_of_a_refused_connection(
    protocol: str, http_client: str, fake_llm: FakeLLMServer, clean_env: pytest.MonkeyPatch
) -> None:
    port = _closed_port()
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
