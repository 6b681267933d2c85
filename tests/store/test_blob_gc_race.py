"""Retention against a live write, on every backend: a turn records a file's content before
its write — content an old session's turn also kept, so the journal holds it already, once —
and a gate holds the turn's write transaction open after its image row while retention prunes
that old session. The content stays: once the write commits, the turn's file can be put back
(a rewind does not call it unrestorable).

On PostgreSQL the gate is an advisory lock the writer's transaction waits for, and retention
runs to its end meanwhile (it skips what a live write holds). On SQLite a transaction holds the
whole file: retention waits for the write, then finds the content named."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar, cast

import psycopg
import pytest

from drover.agent.rewind import plan_rewind
from drover.core.messages import user_message
from drover.journal.protocol import Store
from drover.journal.writes import EndTurn
from drover.store.postgres.store import PostgresStore
from drover.store.sql.plan import Exec, Mode, Plan, Query
from drover.store.sql.store import SqlStore

from .conftest import StoreFactory
from .test_fork_rewind_store import _ended_turn, _image

T = TypeVar("T")

OWNER = "test-host:1:1"
#: The advisory lock the gated write waits for (PostgreSQL).
GATE_KEY = 4242
BOUND = 60.0


class Gate:
    """Holds the next plan ``store`` runs that makes a statement ``at`` matches, in its
    transaction, right after that statement: on PostgreSQL with an advisory lock the test
    holds until :meth:`open`; on SQLite (where the plan then runs on the store's worker
    thread) on an event."""

    def __init__(self, store: Store, pg_url: str | None, at: Callable[[str], bool]) -> None:
        assert isinstance(store, SqlStore)
        self.reached = threading.Event()
        self._at = at
        self._opened = threading.Event()
        self._lock: psycopg.Connection[Any] | None = None
        if pg_url is not None:
            self._lock = psycopg.connect(pg_url, autocommit=True)
            self._lock.execute("SELECT pg_advisory_lock(%s)", [GATE_KEY])
        real = store.connection.perform

        async def perform(plan: Plan[T], mode: Mode) -> T:
            if self.reached.is_set():
                return await real(plan, mode)
            # (SQLite: off the event loop, whose thread the gate would stop otherwise)
            return await real(self._held(plan), "bulk" if pg_url is None else mode)

        store.connection.perform = perform  # type: ignore[method-assign]

    def _held(self, plan: Plan[T]) -> Plan[T]:
        result: Any = None
        try:
            while True:
                op = plan.send(result)
                result = yield op
                if isinstance(op, Exec | Query) and self._at(op.sql) and not self.reached.is_set():
                    self.reached.set()
                    if self._lock is not None:
                        yield Query("SELECT pg_advisory_xact_lock(?)", (GATE_KEY,))
                    else:
                        assert self._opened.wait(BOUND)
        except StopIteration as stop:
            return cast(T, stop.value)

    async def wait_reached(self) -> None:
        assert await asyncio.to_thread(self.reached.wait, BOUND), "the write never got there"

    def open(self) -> None:
        self._opened.set()
        if self._lock is not None:
            self._lock.execute("SELECT pg_advisory_unlock(%s)", [GATE_KEY])

    def close(self) -> None:
        self.open()
        if self._lock is not None:
            self._lock.close()


async def test_retention_spares_content_a_live_write_is_recording(
    make_store: StoreFactory, backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    work = tmp_path / "w"
    work.mkdir()
    async with make_store() as writer, make_store() as gc:
        await writer.create_session(session_id="old", workdir=str(work), model="m")
        await _ended_turn(writer, "old", "one", "a.txt")  # kept b"before a.txt"
        await writer.create_session(session_id="live", workdir=str(work), model="m")
        live = await writer.begin_turn("live", user_message("write a.txt"), OWNER, 30)
        pg_url = str(request.getfixturevalue("pg_url")) if backend == "postgres" else None
        gate = Gate(writer, pg_url, at=lambda sql: "INTO file_images" in sql)
        try:
            # The live turn is about to write a.txt, which held what the old turn kept.
            image = replace(
                _image(live.id, "a.txt", b"before a.txt", b"after"), path=str(work / "a.txt")
            )
            recording = asyncio.create_task(writer.write_batch([image]))
            await gate.wait_reached()
            pruning = asyncio.create_task(gc.prune_batch(cutoff=1e12, keep_last=0, limit=10))
            if backend == "postgres":
                done = await asyncio.wait_for(pruning, BOUND)  # (never waits on a live write)
                assert done.sessions == 1
            gate.open()
            await asyncio.wait_for(recording, BOUND)
            done = await asyncio.wait_for(pruning, BOUND)
            assert done.sessions == 1
        finally:
            gate.close()
        assert await writer.get_session("old") is None
        (kept,) = await writer.file_images("live", 0)
        assert kept.before == "kept" and kept.before_hash is not None
        assert await writer.file_blob(kept.before_hash) == b"before a.txt"
        # The turn ends having written a.txt; its rewind can put the content back.
        (work / "a.txt").write_bytes(b"after")
        await writer.write_batch([EndTurn(turn_id=live.id, status="completed")])
        plan = await plan_rewind(writer, "live", live.id, work)
        assert plan.unrestorable == ()
        assert [f.action for f in plan.files] == ["restore"]


async def test_a_write_after_retention_took_the_content_stores_it_anew(pg_url: str) -> None:
    """The other order, on PostgreSQL: retention has locked the content no image names, to
    delete it, when a live turn's write comes to name it: the write waits for retention's
    transaction, finds the content gone, and stores it again."""
    async with PostgresStore(pg_url) as writer, PostgresStore(pg_url) as gc:
        await writer.create_session(session_id="old", workdir="/w", model="m")
        await _ended_turn(writer, "old", "one", "a.txt")
        await writer.create_session(session_id="live", workdir="/w", model="m")
        live = await writer.begin_turn("live", user_message("write a.txt"), OWNER, 30)
        gate = Gate(gc, pg_url, at=lambda sql: "file_blobs" in sql and "SKIP LOCKED" in sql)
        try:
            pruning = asyncio.create_task(gc.prune_batch(cutoff=1e12, keep_last=0, limit=10))
            await gate.wait_reached()  # the content is locked, to be deleted
            image = _image(live.id, "a.txt", b"before a.txt", b"after")
            recording = asyncio.create_task(writer.write_batch([image]))
            await _a_write_waits_for_a_row(pg_url)
            gate.open()
            assert (await asyncio.wait_for(pruning, BOUND)).sessions == 1
            await asyncio.wait_for(recording, BOUND)
        finally:
            gate.close()
        (kept,) = await writer.file_images("live", 0)
        assert kept.before_hash is not None
        assert await writer.file_blob(kept.before_hash) == b"before a.txt"


async def _a_write_waits_for_a_row(pg_url: str) -> None:
    """Until a backend of the database waits for another transaction's row lock (polling the
    server's own view of its backends: the observable state)."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        async with asyncio.timeout(BOUND):
            while True:
                waiting = conn.execute(
                    "SELECT 1 FROM pg_stat_activity WHERE datname = current_database() "
                    "AND wait_event_type = 'Lock' AND wait_event IN ('transactionid', 'tuple')"
                ).fetchall()
                if waiting:
                    return
                await asyncio.sleep(0.01)
