"""Webhook receivers are independent: a receiver that trickles its answer a byte at a time (a
real socket server) never delays another receiver's delivery, and one attempt is bounded as a
whole, not per read; one receiver gets one attempt at a time, and a deliverer has at most its
lanes in flight. The deliverer runs over a real SQLite journal whose turns ended with a
webhook, as ``drover serve`` runs it."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sqlite3
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import support.writes as writes

from drover.core.messages import user_message
from drover.journal.protocol import Store
from drover.server.webhooks import Deliverer
from drover.store.sqlite.store import SqliteStore

from .support import BOUND

SECRET = "s3cret-for-tests"
OWNER = "elsewhere:42:7"
#: Seconds between two bytes of a trickling answer.
TRICKLE = 0.05


@dataclass
class Trickler:
    """A receiver that reads each POST whole, then answers it a byte at a time — the status
    line, then header lines without end — until :attr:`release` is set (then it ends the
    answer: 200). Counts its connections."""

    url: str = ""
    release: threading.Event = field(default_factory=threading.Event)
    changed: threading.Condition = field(default_factory=threading.Condition)
    open: int = 0
    most_open: int = 0
    posts: int = 0
    #: Connections the client closed before the answer ended.
    cut: int = 0
    answered: int = 0

    def wait_for(self, test: str, predicate: object) -> None:
        with self.changed:
            assert self.changed.wait_for(predicate, BOUND), f"{test}: {self}"  # type: ignore[arg-type]

    def serve(self, conn: socket.socket) -> None:
        with conn:
            _read_request(conn)
            with self.changed:
                self.posts += 1
                self.open += 1
                self.most_open = max(self.most_open, self.open)
                self.changed.notify_all()
            outcome = "answered"
            try:
                for line in _lines():
                    for i in range(len(line)):
                        conn.sendall(line[i : i + 1])
                        self.release.wait(TRICKLE)
                    if self.release.is_set():  # (a whole line sent: end the answer)
                        conn.sendall(b"Content-Length: 0\r\n\r\n")
                        break
            except OSError:
                outcome = "cut"
            with self.changed:
                self.open -= 1
                if outcome == "cut":
                    self.cut += 1
                else:
                    self.answered += 1
                self.changed.notify_all()


def _lines() -> Iterator[bytes]:
    """A status line, then header lines without end."""
    yield b"HTTP/1.1 200 OK\r\n"
    while True:
        yield b"X-Still: thinking\r\n"


def _read_request(conn: socket.socket) -> None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(4096)
        if not chunk:
            return
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(_header(head, b"content-length"))
    while len(body) < length:
        body += conn.recv(4096)


def _header(head: bytes, name: bytes) -> str:
    """The value of the header ``name`` (lower case) in a request's head."""
    for line in head.split(b"\r\n"):
        key, _, value = line.partition(b":")
        if key.strip().lower() == name:
            return value.strip().decode()
    raise AssertionError(f"no {name!r} header")


@dataclass
class Fast:
    """A receiver that answers 204 at once; the delivery ids it got."""

    url: str = ""
    got: list[str] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)


def _listen(handle: object) -> tuple[socket.socket, threading.Thread, str]:
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=handle, args=(conn,), daemon=True).start()  # type: ignore[arg-type]

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    return server, thread, f"http://127.0.0.1:{port}"


@pytest.fixture
def tricklers() -> Iterator[list[Trickler]]:
    made: list[Trickler] = []
    servers = []
    for _ in range(3):
        box = Trickler()
        server, thread, box.url = _listen(box.serve)
        made.append(box)
        servers.append((server, thread))
    yield made
    for box in made:
        box.release.set()
    for server, thread in servers:
        server.shutdown(socket.SHUT_RDWR)  # (wakes the accept: a close alone does not)
        server.close()
        thread.join(BOUND)


@pytest.fixture
async def fast() -> AsyncIterator[Fast]:
    box = Fast()
    loop = asyncio.get_running_loop()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        await reader.readexactly(int(_header(head, b"content-length")))
        delivery = _header(head, b"x-drover-delivery")
        writer.write(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
        await writer.drain()
        writer.close()
        box.got.append(delivery)
        loop.call_soon(box.arrived.set)

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    box.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    async with server:
        yield box


async def _announce(store: Store, *urls: str) -> list[str]:
    """End one turn per URL, each begun with that webhook (in order: the first is due first);
    the outbox rows' ids."""
    session = await store.create_session(workdir="/w", model="m")
    ids = []
    for url in urls:
        turn = await store.begin_turn(session.id, user_message("x"), OWNER, 30, webhook=url)
        await writes.end_turn(store, turn.id, "completed")
        (row,) = await store.deliveries(turn.id)
        ids.append(str(row["id"]))
    return ids


async def _wait(store: Store, test: str, check: object) -> list[dict[str, object]]:
    async with asyncio.timeout(BOUND):
        while True:
            rows = await store.deliveries()
            if check(rows):  # type: ignore[operator]
                return rows
            await asyncio.sleep(0.02)  # (polling the journal: its rows are the observable state)


async def test_a_trickling_receiver_never_delays_another(
    tmp_path: Path, tricklers: list[Trickler], fast: Fast
) -> None:
    slow = tricklers[0]
    async with SqliteStore(tmp_path / "j.db") as store:
        # The slow receiver's delivery is the older: a deliverer taking them in turn is stuck.
        slow_id, fast_id = await _announce(store, slow.url + "/hook", fast.url + "/hook")
        async with Deliverer(store, SECRET, "me:1:1", timeout=BOUND, backoff=0.05):
            await asyncio.to_thread(slow.wait_for, "slow asked", lambda: slow.open == 1)
            await asyncio.wait_for(fast.arrived.wait(), BOUND)
            # Delivered while the slow receiver is still answering its first byte at a time.
            assert fast.got == [fast_id]
            assert (slow.open, slow.answered, slow.cut) == (1, 0, 0)
            rows = await _wait(store, "fast recorded", lambda r: _row(r, fast_id)["delivered_at"])
            assert _row(rows, slow_id)["delivered_at"] is None
            slow.release.set()
            await _wait(store, "slow recorded", lambda r: _row(r, slow_id)["delivered_at"])
        assert (slow.posts, slow.answered) == (1, 1)


async def test_an_attempt_is_bounded_as_a_whole(tmp_path: Path, tricklers: list[Trickler]) -> None:
    slow = tricklers[0]
    async with SqliteStore(tmp_path / "j.db") as store:
        (slow_id,) = await _announce(store, slow.url + "/hook")
        # Bytes come every TRICKLE s, far within the timeout: only a bound on the whole
        # attempt ends it.
        async with Deliverer(store, SECRET, "me:1:1", timeout=10 * TRICKLE, backoff=BOUND):
            rows = await _wait(store, "attempt recorded", lambda r: r[0]["attempts"] == 1)
        (row,) = rows
        assert row["id"] == slow_id and row["delivered_at"] is None
        assert row["last_error"] == f"no answer within {10 * TRICKLE:g} s"
        await asyncio.to_thread(slow.wait_for, "cut", lambda: slow.cut == 1)
        assert slow.answered == 0


async def test_one_attempt_per_receiver_and_at_most_the_lanes(
    tmp_path: Path, tricklers: list[Trickler]
) -> None:
    first, second, third = tricklers
    async with SqliteStore(tmp_path / "j.db") as store:
        urls = [first.url + "/a", first.url + "/a", second.url + "/b", third.url + "/c"]
        await _announce(store, *urls)
        async with Deliverer(store, SECRET, "me:1:1", timeout=BOUND, lanes=2):
            await asyncio.to_thread(first.wait_for, "first", lambda: first.open == 1)
            await asyncio.to_thread(second.wait_for, "second", lambda: second.open == 1)
            # Two lanes, both taken (claimed before their attempts began): the third receiver
            # waits, and so does the first receiver's second delivery, for its first.
            assert _claimed(tmp_path / "j.db") == sorted([first.url + "/a", second.url + "/b"])
            for box in tricklers:
                box.release.set()
            rows = await _wait(store, "all", lambda r: all(x["delivered_at"] for x in r))
        assert len(rows) == 4
        assert (first.posts, second.posts, third.posts) == (2, 1, 1)
        assert first.most_open == second.most_open == third.most_open == 1


def _claimed(db: Path) -> list[str]:
    """The URLs of the outbox rows under a claim now."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        found = conn.execute(
            "SELECT url FROM webhook_outbox WHERE claimed_by IS NOT NULL ORDER BY url"
        ).fetchall()
    return [str(url) for (url,) in found]


def _row(rows: list[dict[str, object]], ident: str) -> dict[str, object]:
    return next(r for r in rows if r["id"] == ident)
