"""The sandbox's one way out: an HTTP proxy, run by drover, that admits only allowed names.

A sandboxed command has a network namespace of its own, with nothing but its own loopback:
the host's loopback services (Redis, PostgreSQL, drover's own server) and every other address
are out of reach. When the settings allow a network (``allow_domains``, or ``--sandbox-network``
which admits every name), drover serves this proxy on a Unix socket of the call
(:func:`serving`), a small forwarder inside the sandbox (:mod:`drover.tools.sandbox_bridge`)
listens on the sandbox's ``127.0.0.1`` and passes connections to it, and ``HTTP_PROXY`` /
``HTTPS_PROXY`` point there. The proxy speaks the two forms clients use:

- ``CONNECT host:port`` (HTTPS, and any tunnel): ``200`` then bytes both ways;
- ``GET http://host/path`` (plain HTTP): the request passed on in origin form, with
  ``Connection: close`` so that one connection carries one request to one checked host.

Each request is checked by its name (:class:`DomainPolicy`): a listed name, or a subdomain of
a ``*.example.org`` entry; anything else gets a ``403`` whose body says why, and is logged.
The proxy resolves the name itself and refuses an address of this machine — loopback, link-local
(cloud metadata), unspecified, or one a socket can bind to — unless the entry names it exactly
(``localhost``, ``127.0.0.1``): a wildcard or ``*`` never reaches a local service, even through
a name whose DNS answer points home.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from drover.config.settings import ANY_DOMAIN, domain_entry

log = logging.getLogger("drover.sandbox")

#: The longest request head the proxy reads (bytes).
MAX_HEAD = 64 * 1024
#: Seconds a client may take to send its request head, and a connection to the upstream.
HEAD_TIMEOUT = 30.0
CONNECT_TIMEOUT = 30.0
#: Read size when relaying.
CHUNK = 64 * 1024
#: Connections one call may have open through the proxy at once: each holds file descriptors
#: of drover's, which a command must not be able to use up.
MAX_CONNECTIONS = 64
#: Request headers dropped on the way to the origin (hop-by-hop, meant for the proxy, or the
#: ``Host``, set again from the checked URL so that it names the host that was admitted).
_DROPPED_HEADERS = frozenset(
    {b"proxy-connection", b"proxy-authorization", b"connection", b"keep-alive", b"te", b"host"}
)


@dataclass(frozen=True, slots=True)
class DomainPolicy:
    """Which names the proxy admits (entries as :func:`~drover.config.settings.domain_entry` makes
    them).
    """

    entries: tuple[str, ...]

    @classmethod
    def of(cls, entries: Iterable[str]) -> DomainPolicy:
        return cls(tuple(domain_entry(e) for e in entries))

    def admits(self, host: str) -> bool:
        """``host`` is listed, or lies below a ``*.`` entry, or ``*`` is listed."""
        host = _normal(host)
        for entry in self.entries:
            if entry in (ANY_DOMAIN, host):
                return True
            if entry.startswith("*.") and host.endswith(entry[1:]) and host != entry[2:]:
                return True
        return False

    def names_exactly(self, host: str) -> bool:
        """``host`` is itself an entry: only then may it reach an address of this machine."""
        return _normal(host) in self.entries


def _normal(host: str) -> str:
    host = host.strip().lower().rstrip(".").strip("[]")
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return host


def is_local(address: str) -> bool:
    """Whether ``address`` (an IP) is this machine's or never leaves it: loopback, unspecified,
    link-local, multicast, or an address a socket can bind to here."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return True  # not an address at all: refuse rather than guess
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_loopback or ip.is_unspecified or ip.is_link_local or ip.is_multicast:
        return True
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((str(ip), 0))
        except OSError:
            return False  # EADDRNOTAVAIL: the address belongs to another machine
    return True


def local_names(entries: Iterable[str]) -> list[str]:
    """The exact names among ``entries`` that reach this machine (``localhost``, its own
    addresses): what a ``drover serve`` must not allow without a token, since commands could
    then reach it. Resolves them now (a name that does not resolve reaches nothing)."""
    found = []
    for entry in entries:
        if entry == ANY_DOMAIN or entry.startswith("*."):
            continue  # the proxy never takes a wildcard home
        try:
            infos = socket.getaddrinfo(entry, None, type=socket.SOCK_STREAM)
        except OSError:
            continue
        if any(is_local(str(info[4][0])) for info in infos):
            found.append(entry)
    return found


class Refused(Exception):
    """A request the proxy answers itself, with ``status`` and a one-line reason."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


_STATUS_TEXT = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway", 504: "Gateway Timeout"}


@dataclass(frozen=True, slots=True)
class _Request:
    connect: bool
    host: str
    port: int
    #: The head to send to the origin (plain HTTP); empty for CONNECT.
    head: bytes


def parse_head(head: bytes) -> _Request:
    """The target of a request head; :class:`Refused` (400) when it is not one a proxy takes."""
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
        raise Refused(400, "not an HTTP/1.x request")
    method, target, version = parts
    text = target.decode("ascii", "replace")
    if method == b"CONNECT":
        host, sep, port = text.rpartition(":")
        if not sep or not port.isdigit() or not host:
            raise Refused(400, f"CONNECT needs host:port, got {text!r}")
        return _Request(True, _normal(host), int(port), b"")
    url = urlsplit(text)
    if url.scheme != "http" or not url.hostname:
        raise Refused(400, f"a proxy request names an http:// URL, got {text[:200]!r}")
    try:
        number = url.port or 80
    except ValueError:
        raise Refused(400, f"bad port in {text[:200]!r}") from None
    path = (url.path or "/") + (f"?{url.query}" if url.query else "")
    kept = [
        line
        for line in lines[1:]
        if line and line.split(b":", 1)[0].strip().lower() not in _DROPPED_HEADERS
    ]
    first = b" ".join([method, path.encode("ascii", "replace"), version])
    authority = f"Host: {url.netloc.rpartition('@')[2]}".encode("ascii", "replace")
    rebuilt = b"\r\n".join([first, authority, *kept, b"Connection: close", b"", b""])
    return _Request(False, _normal(url.hostname), number, rebuilt)


class Proxy:
    """The proxy of one sandboxed call; :meth:`handle` serves one client connection."""

    def __init__(self, policy: DomainPolicy) -> None:
        self.policy = policy
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def connections(self) -> int:
        """Connections being served now."""
        return len(self._tasks)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if len(self._tasks) >= MAX_CONNECTIONS:
            log.warning("sandbox proxy refused a connection: %d already open", MAX_CONNECTIONS)
            writer.close()
            return
        if task is not None:
            self._tasks.add(task)
        try:
            await self._serve(reader, writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass  # the client went away, or sent no head: nothing to answer
        except asyncio.CancelledError:
            # Only close() cancels a connection (its sandbox is gone). The task is the
            # server's leaf, awaited by nobody: ending it normally keeps asyncio from logging
            # each one as an error.
            pass
        finally:
            if task is not None:
                self._tasks.discard(task)
            writer.close()

    async def close(self) -> None:
        """End every connection still relayed (the sandbox is gone)."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(HEAD_TIMEOUT):
                head = await reader.readuntil(b"\r\n\r\n")
            request = parse_head(head)
            upstream = await self._open(request)
        except (TimeoutError, asyncio.LimitOverrunError):
            return
        except Refused as refusal:
            await _answer(writer, refusal)
            return
        up_reader, up_writer = upstream
        try:
            if request.connect:
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                up_writer.write(request.head)
            await asyncio.gather(_relay(reader, up_writer), _relay(up_reader, writer))
        finally:
            up_writer.close()

    async def _open(self, request: _Request) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        host, port = request.host, request.port
        where = f"{host}:{port}"
        if not self.policy.admits(host):
            log.warning("sandbox proxy refused %s: not an allowed domain", where)
            raise Refused(
                403,
                f"drover sandbox: {host} is not an allowed domain (allowed: "
                f"{', '.join(self.policy.entries)}; add it with --sandbox-allow-domain {host} "
                "or [sandbox] allow_domains)",
            )
        loop = asyncio.get_running_loop()
        try:
            found = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise Refused(502, f"drover sandbox: cannot resolve {host}: {exc}") from None
        addresses = [info[4][0] for info in found]
        if not self.policy.names_exactly(host) and any(is_local(str(a)) for a in addresses):
            log.warning("sandbox proxy refused %s: an address of this machine", where)
            raise Refused(
                403,
                f"drover sandbox: {host} resolves to an address of this machine, which "
                "commands may reach only when the allow-list names it exactly",
            )
        failure: OSError | TimeoutError | None = None
        for address in addresses:
            try:
                async with asyncio.timeout(CONNECT_TIMEOUT):
                    return await asyncio.open_connection(str(address), port, limit=CHUNK)
            except (OSError, TimeoutError) as exc:
                failure = exc
        raise Refused(502, f"drover sandbox: cannot connect to {where}: {failure}")


async def _answer(writer: asyncio.StreamWriter, refusal: Refused) -> None:
    body = (refusal.reason + "\n").encode("utf-8", "replace")
    text = _STATUS_TEXT.get(refusal.status, "Error")
    head = (
        f"HTTP/1.1 {refusal.status} {text}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    writer.write(head.encode("ascii") + body)
    with contextlib.suppress(OSError):
        await writer.drain()


async def _relay(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    """Copy until end-of-file, then pass the end on (half-close)."""
    try:
        while data := await source.read(CHUNK):
            sink.write(data)
            await sink.drain()
        if sink.can_write_eof():
            sink.write_eof()
    except OSError:
        sink.close()


@contextlib.asynccontextmanager
async def serving(path: Path, domains: Iterable[str]) -> AsyncIterator[Proxy]:
    """The proxy listening on the Unix socket ``path`` while the context is open."""
    proxy = Proxy(DomainPolicy.of(domains))
    server = await asyncio.start_unix_server(proxy.handle, path=str(path), limit=MAX_HEAD)
    try:
        yield proxy
    finally:
        server.close()
        await proxy.close()
        await server.wait_closed()
