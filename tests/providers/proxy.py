"""A small forward proxy on 127.0.0.1 for provider tests, and the environment it is named by.

:class:`ForwardProxy` serves both ways a client uses a proxy: a plain-HTTP request in absolute
form (``HTTP_PROXY``, ``ALL_PROXY``), and a ``CONNECT`` tunnel (``HTTPS_PROXY``, whose TLS then
runs end to end between the client and the server, the proxy seeing only encrypted bytes).
"""

from __future__ import annotations

import asyncio
import contextlib
from urllib.parse import urlsplit

import pytest

#: The variables a client takes a proxy from; each also has a lowercase twin.
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")

#: A tunnel's answer to ``CONNECT`` once the proxy reached the target.
ESTABLISHED = b"HTTP/1.1 200 Connection established\r\n\r\n"


def unset_proxy_vars(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unsets every proxy variable, upper- and lowercase, so the machine's cannot leak in."""
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


class ForwardProxy:
    """A forward proxy on 127.0.0.1: one request, or one tunnel, per client connection.

    A plain-HTTP request comes with an absolute-form request line
    (``POST http://127.0.0.1:PORT/v1/messages HTTP/1.1``): the proxy connects to its target and
    sends the head on in origin form (``POST /v1/messages HTTP/1.1``) — the fake server, like
    most origin servers, routes only that — with ``Connection: close``. ``Connection: close``
    makes the server close after its answer and tells the client not to send another request on
    the connection, so a proxy that rewrites only a connection's first request line sees every
    request.

    ``CONNECT 127.0.0.1:PORT HTTP/1.1`` opens a tunnel instead: the proxy connects to that
    address, answers ``200 Connection established``, and from then on carries whatever either
    side sends (the client's TLS handshake, then its requests), without reading it.

    Either way it then relays both directions as the bytes come (a streamed answer passes
    through event by event) until either side closes.
    """

    def __init__(self) -> None:
        #: Each request line received, as the client sent it.
        self.request_lines: list[str] = []
        #: Each request's ``Proxy-Authorization`` values (one per such field; none if none).
        self.authorizations: list[list[str]] = []
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
        line, _, text = head.decode("latin-1").partition("\r\n")
        fields = [f for f in text.split("\r\n") if f]
        self.request_lines.append(line)
        self.authorizations.append(_values(fields, "proxy-authorization"))
        method, target, version = line.split(" ")
        if method == "CONNECT":
            host, _, port = target.rpartition(":")
            server_reader, server_writer = await asyncio.open_connection(host, int(port))
            writer.write(ESTABLISHED)
        else:
            url = urlsplit(target)
            assert url.hostname is not None and url.port is not None, line
            origin = url.path + (f"?{url.query}" if url.query else "")
            kept = [
                f
                for f in fields
                if f.split(":", 1)[0].lower() not in ("connection", "proxy-connection")
            ]
            upstream = "\r\n".join([f"{method} {origin} {version}", *kept, "Connection: close"])
            server_reader, server_writer = await asyncio.open_connection(url.hostname, url.port)
            server_writer.write(f"{upstream}\r\n\r\n".encode("latin-1"))
        try:
            # The rest of the request (its body, or the tunnel's bytes), then whatever either
            # side sends.
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


def _values(fields: list[str], name: str) -> list[str]:
    """The values of the head's fields called ``name`` (lowercase), in order."""
    pairs = (item.partition(":") for item in fields)
    return [value.strip() for key, _, value in pairs if key.strip().lower() == name]


async def _relay(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    """Copies ``source`` to ``sink`` as the bytes arrive, until ``source`` ends."""
    with contextlib.suppress(ConnectionError):
        while chunk := await source.read(65536):
            sink.write(chunk)
            await sink.drain()
