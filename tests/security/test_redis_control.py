"""Reaching Redis is not enough to drive a turn: control messages between server processes are
sealed with the cluster's key (:mod:`drover.cluster.signing`).

The attack: two ``drover serve`` processes on one PostgreSQL journal and one Redis; B runs a
turn that waits for permission to write a file. Whoever can write to Redis — here a plain Redis
client, as a sandboxed command with the network would — reads the pending request off the
session's event stream and posts ``{"op": "decide", "decision": "allow"}`` to B's control
stream. B must drop it (and say so), the call must stay unanswered, and a genuine answer posted
to A must still reach B. Below it, the relay itself on a real Redis: forged, replayed and
misaddressed messages dropped, genuine ones delivered once, in order."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
import redis.asyncio
from server.support import Served, clean_env, start_server
from support import redis as redis_support

from drover.cluster.relay import Relay, control_key, events_key
from drover.cluster.signing import Seal, cluster_key
from drover.runtime.hub import Hub
from drover.store.sqlite.store import SqliteStore
from drover.testing.server import FakeLLMServer

BOUND = 60.0
KEY = b"k" * 64


# -- the relay on a real Redis ---------------------------------------------------------------


async def test_the_relay_acts_only_on_genuine_fresh_messages_for_it(
    tmp_path: Path, redis_server: redis_support.RedisServer
) -> None:
    got: list[dict[str, Any]] = []
    arrived = asyncio.Event()

    async def on_control(message: dict[str, Any]) -> None:
        got.append(message)
        arrived.set()

    async def delivered(count: int) -> None:
        while len(got) < count:
            arrived.clear()
            await asyncio.wait_for(arrived.wait(), BOUND)

    store = SqliteStore(tmp_path / "journal.db")
    b_seal = Seal(KEY)
    a = Relay(Hub(), store, owner="A", redis_url=redis_server.url, seal=Seal(KEY))
    b = Relay(Hub(), store, owner="B", redis_url=redis_server.url, seal=b_seal)
    c = Relay(Hub(), store, owner="C", redis_url=redis_server.url, seal=Seal(b"other" * 10))
    b.on_control = on_control
    attacker = redis.asyncio.Redis.from_url(redis_server.url)
    decide = {"op": "decide", "session": "s", "request_id": "r1", "decision": "allow"}
    async with store:
        for relay in (a, b, c):
            await relay.start()
        try:
            # Not sealed, sealed with another key, sealed for another process: dropped.
            await attacker.xadd(control_key("B"), {"body": json.dumps(decide)})
            await c.control("B", decide)
            await a.control("C", decide)
            (misaddressed,) = await attacker.xrange(control_key("C"))
            await attacker.xadd(control_key("B"), misaddressed[1])
            await a.control("B", {**decide, "request_id": "genuine-1"})
            await delivered(1)
            # The genuine message again (as read off the stream): dropped as a replay.
            entries = await attacker.xrange(control_key("B"))
            await attacker.xadd(control_key("B"), entries[-1][1])
            await a.control("B", {**decide, "request_id": "genuine-2"})
            await delivered(2)
        finally:
            for relay in (a, b, c):
                await relay.close()
            await attacker.aclose()
    assert [m["request_id"] for m in got] == ["genuine-1", "genuine-2"]
    assert b_seal.dropped == 4


async def test_a_forged_live_event_never_reaches_a_follower(
    tmp_path: Path, redis_server: redis_support.RedisServer
) -> None:
    """A permission question the turn never asked, written into the session's stream, is not
    shown to the clients another process serves; the genuine event after it is."""
    store = SqliteStore(tmp_path / "journal.db")
    hub = Hub()
    a = Relay(Hub(), store, owner="A", redis_url=redis_server.url, seal=Seal(KEY))
    b = Relay(hub, store, owner="B", redis_url=redis_server.url, seal=Seal(KEY))
    attacker = redis.asyncio.Redis.from_url(redis_server.url)
    question = {"type": "permission_request", "request_id": "r1", "summary": "bash: ls"}
    forged = hub.feed("other").frame(1, "t", question, 0)
    async with store:
        for relay in (a, b):
            await relay.start()
        following = hub.feed("s").subscribe()
        try:
            await b.attach("s")
            await attacker.xadd(events_key("s"), {"resync": 1})
            await attacker.xadd(events_key("s"), {"seq": 1, "prev": 0, "wire": forged.wire})
            a.publish("s", 1, "t", {"type": "error", "error": "genuine"}, 0)
            frames = await following.wait(BOUND)
        finally:
            for relay in (a, b):
                await relay.close()
            await attacker.aclose()
    assert not following.lagged
    assert [(frame.seq, frame.type) for frame in frames] == [(1, "error")]
    assert b"genuine" in frames[0].encode()


def test_a_stale_message_is_dropped_and_the_key_file_is_private(tmp_path: Path) -> None:
    now = [1000.0]
    sender, receiver = Seal(KEY, clock=lambda: now[0]), Seal(KEY, clock=lambda: now[0])
    sealed = sender.seal("B", {"op": "interrupt", "session": "s"})
    now[0] += 61
    assert receiver.open("B", sealed) is None
    path = tmp_path / "data" / "cluster.key"
    key = cluster_key(path)
    assert key == cluster_key(path) and len(key) == 64
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700


# -- two drover serve processes on PostgreSQL and Redis ---------------------------------------


@pytest.fixture(scope="module")
def pair(
    fake: FakeLLMServer,
    journal_url: str,
    redis_server: redis_support.RedisServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Served, Served, Path]]:
    """A (answers) and B (asks), sharing the journal, Redis, and the user's data directory
    (where the cluster key is); and B's workdir."""
    data = tmp_path_factory.mktemp("data")
    env = clean_env(XDG_DATA_HOME=str(data))
    shared = ["--db", journal_url, "--redis", redis_server.url, "--sandbox", "off"]
    a_dir, b_dir = tmp_path_factory.mktemp("a"), tmp_path_factory.mktemp("b")
    a = start_server(fake, a_dir, *shared, env=env)
    b = start_server(fake, b_dir, *shared, "--permission-mode", "ask", env=env)
    try:
        yield a, b, b_dir / "work"
    finally:
        for served in (a, b):
            served.close()


def _pending_request(url: str, session_id: str) -> str:
    """The id of the session's permission request, as anyone reading Redis finds it."""
    client = redis.Redis.from_url(url)
    try:
        position = "0-0"
        while True:
            found = client.xread({events_key(session_id): position}, block=int(BOUND * 1000))
            assert found, "no permission request came"
            for entry_id, fields in found[0][1]:
                position = entry_id
                wire = fields.get(b"wire", b"").decode()
                if "event: permission_request" in wire:
                    data = wire.split("data: ", 1)[1].split("\n", 1)[0]
                    return str(json.loads(data)["request_id"])
    finally:
        client.close()


def _snapshot(server: Served, session_id: str) -> dict[str, Any]:
    with server.client() as client:
        return dict(client.get(f"/v1/sessions/{session_id}").json())


def test_a_forged_answer_through_redis_approves_nothing(
    fake: FakeLLMServer,
    pair: tuple[Served, Served, Path],
    journal_url: str,
    redis_server: redis_support.RedisServer,
) -> None:
    a, b, work = pair
    fake.script(
        {"tool_calls": [{"name": "write_file", "input": {"path": "p.txt", "content": "x"}}]},
        {"text": "Written."},
    )
    with b.client() as client:
        sid = str(client.post("/v1/sessions", json={}).json()["id"])
        assert client.post(f"/v1/sessions/{sid}/messages", json={"content": "go"}).is_success
    request_id = _pending_request(redis_server.url, sid)
    with psycopg.connect(journal_url) as conn:
        (owner,) = conn.execute("SELECT owner FROM turns WHERE session_id = %s", (sid,)).fetchone()
    forged = {"op": "decide", "session": sid, "request_id": request_id, "decision": "allow"}
    attacker = redis.Redis.from_url(redis_server.url)
    attacker.xadd(control_key(owner), {"body": json.dumps(forged)})
    attacker.close()
    # B says it dropped it — or, were it taken, the turn would end: whichever comes first.
    deadline = time.monotonic() + BOUND
    while not any("control message dropped" in line for line in b.stderr):
        assert _snapshot(a, sid)["turns"][0]["status"] == "running", "the forgery was obeyed"
        assert time.monotonic() < deadline, f"B never said it dropped the forgery: {b.stderr}"
        time.sleep(0.05)
    (call,) = _snapshot(a, sid)["turns"][0]["tool_calls"]
    assert call["state"] == "awaiting-permission"
    assert not (work / "p.txt").exists()
    # The answer of a user of A reaches B, sealed.
    with a.client() as client:
        url = f"/v1/sessions/{sid}/permissions/{request_id}"
        assert client.post(url, json={"decision": "allow"}).status_code == 200
    deadline = time.monotonic() + BOUND
    while _snapshot(a, sid)["turns"][0]["status"] == "running":
        assert time.monotonic() < deadline, "the genuine answer did not reach B"
        time.sleep(0.05)
    assert (work / "p.txt").read_text() == "x"
