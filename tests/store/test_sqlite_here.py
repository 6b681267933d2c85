"""Writes on the calling thread (see :mod:`drover.store.sqlite.connection`): made there only when
nothing can make them wait — no call queued on the worker, the write lock free at once — and
never at the cost of the order of calls, a blocked event loop or an unbounded WAL."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.writes import append_event

from drover.core.messages import TextBlock, assistant_message, user_message
from drover.journal.writes import AppendMessage
from drover.store.sql.batch import BULK_CHARS
from drover.store.sqlite.connection import CHECKPOINT_EVERY, WAL_SIZE_LIMIT, Conn
from drover.store.sqlite.store import SqliteStore

from .helpers import traced

OWNER = "h:1:1"

# Holds the write lock of the file named on its command line until told to let it go.
LOCK_HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.readline()
conn.execute("COMMIT")
print("released", flush=True)
"""


async def _turn(store: SqliteStore) -> tuple[str, str]:
    session = await store.create_session(workdir="/w", model="m")
    turn = await store.begin_turn(session.id, user_message("go"), OWNER, 60.0)
    return session.id, turn.id


def _trace(conn: Conn, seen: list[str], name: str) -> None:
    conn.set_trace_callback(lambda sql: seen.append(f"{name}: {sql.split()[0]}"))


@contextlib.contextmanager
def _lock_held_by_another_process(path: Path) -> Iterator[subprocess.Popen[str]]:
    with subprocess.Popen(
        [sys.executable, "-c", LOCK_HOLDER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as holder:
        try:
            assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
            yield holder
        finally:
            holder.kill()


def _release(holder: subprocess.Popen[str]) -> None:
    assert holder.stdin is not None and holder.stdout is not None
    holder.stdin.write("go\n")
    holder.stdin.flush()
    assert holder.stdout.readline() == "released\n"


async def test_a_write_is_made_on_the_calling_thread_when_nothing_waits(tmp_path: Path) -> None:
    async with SqliteStore(tmp_path / "j.db") as store:
        session_id, turn_id = await _turn(store)
        async with traced(store, by_connection=True) as seen:
            task = asyncio.create_task(append_event(store, session_id, turn_id, {"type": "x"}))
            await asyncio.sleep(0)  # the task's first step: nothing is left to wait for
            assert task.done() and task.result() == 1
    assert seen[0] == "here: BEGIN" and seen[-1] == "here: COMMIT"
    assert not [s for s in seen if s.startswith("worker")]


async def test_a_locked_file_sends_the_write_to_the_worker_and_the_loop_runs_on(
    tmp_path: Path,
) -> None:
    path = tmp_path / "j.db"
    async with SqliteStore(path) as store:
        session_id, turn_id = await _turn(store)
        with _lock_held_by_another_process(path) as holder:
            write = asyncio.create_task(append_event(store, session_id, turn_id, {"type": "x"}))
            started = time.monotonic()
            await asyncio.sleep(0)  # the write's first step: it finds the lock taken
            # A write that waited for the lock here would hold the loop for the store's busy
            # timeout (5 s); it waits on the worker instead, and the loop runs on.
            assert time.monotonic() - started < 2
            ticked = asyncio.Event()
            asyncio.get_running_loop().call_soon(ticked.set)
            await asyncio.wait_for(ticked.wait(), timeout=2)
            for _ in range(3):
                await asyncio.sleep(0)
            assert not write.done()
            # Cancelled while it waits: once the lock is free it is made all the same.
            write.cancel()
            await asyncio.to_thread(_release, holder)
        with pytest.raises(asyncio.CancelledError):
            await write
        assert [e.type for e in await store.events_after(session_id)] == ["x"]


async def test_a_write_never_overtakes_a_call_queued_before_it(tmp_path: Path) -> None:
    async with SqliteStore(tmp_path / "j.db") as store:
        session_id, turn_id = await _turn(store)
        gate = threading.Event()
        order: list[str] = []

        def slow(conn: Conn) -> None:
            gate.wait(timeout=10)
            order.append("queued call")
            _trace(conn, order, "worker")

        queued = asyncio.create_task(store.connection._call(slow))
        await asyncio.sleep(0)  # the call is on the worker, held at the gate
        assert store.connection._here is not None
        _trace(store.connection._here, order, "here")
        write = asyncio.create_task(append_event(store, session_id, turn_id, {"type": "x"}))
        await asyncio.sleep(0)
        assert not write.done() and order == []
        gate.set()
        await asyncio.wait_for(asyncio.gather(queued, write), timeout=10)
        await store.connection._call(lambda conn: conn.set_trace_callback(None))
        store.connection._here.set_trace_callback(None)
    assert order[:2] == ["queued call", "worker: BEGIN"] and "worker: INSERT" in order
    assert not [s for s in order if s.startswith("here")]


async def test_the_wal_stays_bounded_when_every_write_is_made_here(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    wal = f"{path}-wal"
    payload = {"type": "x", "blob": "y" * 4000}  # ~5 pages of 1 KiB a commit
    writes = 12 * CHECKPOINT_EVERY
    async with SqliteStore(path) as store:
        session_id, turn_id = await _turn(store)
        largest = 0
        for _ in range(writes):
            await append_event(store, session_id, turn_id, payload)
            largest = max(largest, os.stat(wal).st_size)
        await store.connection._call(lambda conn: None)  # behind any checkpoint asked for
        count = await store.connection._call(
            lambda conn: conn.execute("SELECT COUNT(*) FROM events").fetchone()[0]
        )
    assert count == writes
    # Without the worker's checkpoints the WAL would hold every commit: ~4 MiB here.
    assert writes * 4000 > WAL_SIZE_LIMIT
    assert largest < WAL_SIZE_LIMIT / 2, largest


async def test_a_batch_of_many_bytes_is_made_on_the_worker(tmp_path: Path) -> None:
    # Storing a long answer (its message, the fold of its text rows) takes milliseconds per
    # 100 KB: too long to stall the event loop for, even with the worker idle.
    async with SqliteStore(tmp_path / "j.db") as store:
        _, turn_id = await _turn(store)
        async with traced(store, by_connection=True) as seen:
            for size in (100, BULK_CHARS + 1):
                message = assistant_message([TextBlock(text="x" * size)])
                await store.write_batch([AppendMessage(turn_id, message)])
                seen.append("--")
        stored = [m.message.text for m in await store.turn_messages(turn_id)]
    small, large = " ".join(seen).split("--")[:2]
    assert "here: INSERT" in small and "worker" not in small
    assert "worker: INSERT" in large and "here" not in large
    assert [len(text) for text in stored] == [100, BULK_CHARS + 1]
