"""A TCP proxy in front of PostgreSQL that loses the acknowledgement of one COMMIT.

The test points a store at :attr:`CommitAckProxy.port` and arms the proxy with a predicate
over the statements of a transaction. The next ``COMMIT`` of a transaction that satisfies it
goes to the server, which commits; the server's answer is read and thrown away, the backend is
ended with ``pg_terminate_backend`` and the client's socket closed — exactly what a client sees
when the connection dies after the server committed and before the answer arrived. Armed with
``deliver=False``, the COMMIT itself is lost instead: the connection dies before it reaches
the server, whose transaction is left open until the backend notices. Every other byte is
passed on as it is. The client must connect with ``sslmode=disable`` (the proxy reads
the protocol's messages: the startup message, then typed messages each way).
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Callable

import psycopg

Predicate = Callable[[list[str]], bool]


def _read(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return out


def _message(sock: socket.socket) -> tuple[bytes, bytes]:
    kind = _read(sock, 1)
    (length,) = struct.unpack("!i", _read(sock, 4))
    return kind, _read(sock, length - 4)


def _sql(kind: bytes, body: bytes) -> str | None:
    """The statement a Query or Parse message carries."""
    if kind == b"Q":
        return body.split(b"\0", 1)[0].decode()
    if kind == b"P":
        return body.split(b"\0", 2)[1].decode()
    return None


class _Link:
    """One client connection and its server connection."""

    def __init__(self, proxy: CommitAckProxy, client: socket.socket) -> None:
        self.proxy = proxy
        self.client = client
        self.server = socket.create_connection(("127.0.0.1", proxy.upstream_port))
        # The proxy sends each protocol message on its own: with Nagle's algorithm on, each
        # small message after the first waits for the peer's delayed ACK (tens of ms a round
        # trip, seconds over a migration).
        for sock in (self.client, self.server):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.statements: list[str] = []
        self.pid = 0
        self.dropping = False

    def start(self) -> None:
        for pump in (self._from_client, self._from_server):
            threading.Thread(target=self._guard, args=(pump,), daemon=True).start()

    def _guard(self, pump: Callable[[], None]) -> None:
        try:
            pump()
        except OSError:
            pass
        finally:
            self.close()

    def close(self) -> None:
        for sock in (self.client, self.server):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _from_client(self) -> None:
        (length,) = struct.unpack("!i", head := _read(self.client, 4))
        self.server.sendall(head + _read(self.client, length - 4))  # the startup message
        while True:
            kind, body = _message(self.client)
            sql = _sql(kind, body)
            if sql is not None:
                words = sql.lstrip().upper()
                if words.startswith("BEGIN"):
                    self.statements = []
                elif words.startswith("COMMIT") and self.proxy.take(self.statements):
                    if not self.proxy.deliver:
                        self.close()  # (the server's transaction stays open, for a while)
                        self.proxy.dropped.set()
                        return
                    self.dropping = True
                else:
                    self.statements.append(sql)
            self.server.sendall(kind + struct.pack("!i", len(body) + 4) + body)

    def _from_server(self) -> None:
        while True:
            kind, body = _message(self.server)
            if kind == b"K":  # BackendKeyData: the backend's pid
                (self.pid,) = struct.unpack("!i", body[:4])
            if self.dropping:
                if kind == b"Z":  # ready for the next query: the COMMIT is done
                    self.proxy.terminate(self.pid)
                    self.close()
                    self.proxy.dropped.set()
                    return
                continue
            self.client.sendall(kind + struct.pack("!i", len(body) + 4) + body)


class CommitAckProxy:
    def __init__(self, upstream_port: int, admin_url: str) -> None:
        self.upstream_port = upstream_port
        self._admin_url = admin_url
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._armed: Predicate | None = None
        self.deliver = True
        self._lock = threading.Lock()
        #: Set once a COMMIT's answer was thrown away.
        self.dropped = threading.Event()
        self._links: list[_Link] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, url: str) -> str:
        """``url`` (a URL of the upstream server) through the proxy."""
        url = url.replace(f":{self.upstream_port}/", f":{self.port}/")
        return url + ("&" if "?" in url else "?") + "sslmode=disable&gssencmode=disable"

    def arm(self, when: Predicate, *, deliver: bool = True) -> None:
        """Lose the answer to the next COMMIT of a transaction whose statements satisfy
        ``when`` (``deliver=False``: lose the COMMIT itself)."""
        with self._lock:
            self._armed, self.deliver = when, deliver

    def take(self, statements: list[str]) -> bool:
        with self._lock:
            if self._armed is None or not self._armed(statements):
                return False
            self._armed = None
            return True

    def terminate(self, pid: int) -> None:
        with psycopg.connect(self._admin_url, autocommit=True) as conn:
            conn.execute("SELECT pg_terminate_backend(%s)", [pid])

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            link = _Link(self, client)
            self._links.append(link)
            link.start()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # (wakes the accepting thread)
        self._listener.close()
        for link in self._links:
            link.close()
