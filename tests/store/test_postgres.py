"""PostgreSQL specifics: several processes on one database, concurrent recovery, migrations,
connection errors, and what PostgreSQL cannot store as SQLite does (NUL characters)."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator

import psycopg
import pytest
from support import pg
from support.ports import free_port
from support.writes import append_event, append_partial_text, end_turn, upsert_tool_call

from drover.core.messages import TextBlock, user_message
from drover.errors import StoreError
from drover.store import open_store
from drover.store.migrations.postgres import PG_MIGRATIONS, applied_migrations, migrate
from drover.store.migrations.steps import SQLITE_MIGRATIONS
from drover.store.postgres.store import PostgresStore

from .test_store_recovery import dead_process, this_process

N = 40

# A worker process: opens its own store, says "ready", waits for "go", then does its part.
_CHILD = """
import asyncio, json, sys
from drover.journal.writes import AppendEvent, AppendPartialText
from drover.store.postgres.store import PostgresStore

async def main():
    url, job, session_id, turn_id, who = sys.argv[1:6]
    async with PostgresStore(url) as store:
        await store.events_after(session_id or "none")  # connected and warm
        print("ready", flush=True)
        sys.stdin.readline()
        if job == "append":
            for i in range(int(sys.argv[6])):
                tick = {"type": "tick", "who": who, "i": i}
                await store.write_batch([AppendEvent(session_id, turn_id, tick)])
                await store.write_batch([AppendPartialText(turn_id, 1, 0, f"{who}{i} ")])
            print(json.dumps([]), flush=True)
        else:
            print(json.dumps(await store.recover_orphans()), flush=True)

asyncio.run(main())
"""


class Worker:
    """A child process driving its own :class:`PostgresStore` (another process, other pool)."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @classmethod
    async def start(cls, *args: str) -> Worker:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _CHILD,
            *args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        worker = cls(proc)
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), timeout=30)
        if line != b"ready\n":
            _, err = await proc.communicate()
            raise AssertionError(f"worker did not start: {line!r} {err.decode()}")
        return worker

    async def stop(self) -> None:
        """Kill the worker if it is still running (a failed test) and reap it."""
        if self.proc.returncode is None:
            self.proc.kill()
        await self.proc.communicate()

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"go\n")

    async def result(self) -> list[str]:
        out, err = await asyncio.wait_for(self.proc.communicate(), timeout=60)
        assert self.proc.returncode == 0, err.decode()
        return list(json.loads(out.decode().splitlines()[-1]))


@pytest.fixture
async def workers() -> AsyncIterator[list[Worker]]:
    """Workers to start; any left running when the test ends are killed."""
    started: list[Worker] = []
    yield started
    for worker in started:
        await worker.stop()


@pytest.fixture
async def store(pg_url: str) -> AsyncIterator[PostgresStore]:
    async with PostgresStore(pg_url) as opened:
        yield opened


async def _running_turn(store: PostgresStore, owner: str, session_id: str | None = None) -> str:
    if session_id is None:
        session_id = (await store.create_session(workdir="/w", model="m")).id
    turn = await store.begin_turn(session_id, user_message("go"), owner, 3600)
    return turn.id


# -- several processes -----------------------------------------------------------------------


async def test_processes_appending_to_one_session_lose_nothing(
    store: PostgresStore, pg_url: str, workers: list[Worker]
) -> None:
    session = await store.create_session(session_id="shared", workdir="/w", model="m")
    turn = await store.begin_turn(session.id, None, "h:1:1", 30)
    args = (pg_url, "append", session.id, turn.id)
    workers += await asyncio.gather(*(Worker.start(*args, who, str(N)) for who in ("p1", "p2")))
    for worker in workers:
        worker.go()
    for i in range(N):  # meanwhile this process writes too
        await append_event(store, session.id, turn.id, {"type": "tick", "who": "p0", "i": i})
        await append_partial_text(store, turn.id, 1, 0, f"p0{i} ")
    for worker in workers:
        await worker.result()

    events = await store.events_after(session.id)
    assert [e.seq for e in events] == list(range(1, 6 * N + 1))
    texts = [e.payload["text"] for e in events if e.type == "text_delta"]
    for who in ("p0", "p1", "p2"):
        ticks = [e.payload["i"] for e in events if e.payload.get("who") == who]
        assert ticks == list(range(N)), f"lost or reordered writes of {who}"
        assert [t for t in texts if t.startswith(who)] == [f"{who}{i} " for i in range(N)]
    # The deltas fold into one partial message holding every piece.
    (synth,) = await store.turn_messages(turn.id)
    assert len(synth.message.text.split()) == 3 * N


async def test_concurrent_recovery_recovers_each_orphan_once(
    store: PostgresStore, pg_url: str, workers: list[Worker]
) -> None:
    orphans: list[str] = []
    dead = dead_process()
    for _ in range(18):  # a session holds at most one running turn
        turn_id = await _running_turn(store, dead)
        await upsert_tool_call(store, turn_id, "c", call_index=0, name="bash", state="running")
        await append_partial_text(store, turn_id, 1, 0, "half")
        orphans.append(turn_id)
    live = await _running_turn(store, this_process())

    worker = await Worker.start(pg_url, "recover", "", "", "w")
    workers.append(worker)
    async with PostgresStore(pg_url) as other:
        worker.go()
        here = await asyncio.gather(store.recover_orphans(), other.recover_orphans())
    results = [*here, await worker.result()]

    counts = Counter(turn_id for result in results for turn_id in result)
    assert sorted(counts) == sorted(orphans)
    assert set(counts.values()) == {1}, "a turn was recovered twice"
    assert live not in counts
    for session in await store.list_sessions(limit=100):
        events = await store.events_after(session.id)
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        terminal = Counter(e.turn_id for e in events if e.type == "incomplete")
        closed = Counter(e.turn_id for e in events if e.type == "tool_state")
        turns = [t.id for t in await store.turns(session.id) if t.id != live]
        assert terminal == closed == dict.fromkeys(turns, 1)


async def test_a_live_owners_turn_is_never_recovered(store: PostgresStore, pg_url: str) -> None:
    owner = this_process()
    live = await _running_turn(store, owner)
    remote = await _running_turn(store, "other-host:1:1")  # its lease holds
    dead = await _running_turn(store, dead_process())
    async with PostgresStore(pg_url) as other:
        for _ in range(5):
            found = await asyncio.gather(
                store.recover_orphans(),
                other.recover_orphans(),
                store.renew_lease(live, owner, 3600),
            )
            assert live not in found[0] + found[1]
            assert remote not in found[0] + found[1]
            assert found[2]
    statuses = {
        t.id: t.status for s in await store.list_sessions() for t in await store.turns(s.id)
    }
    assert statuses == {live: "running", remote: "running", dead: "interrupted"}


async def test_recovery_rechecks_the_lease_inside_its_transaction(
    store: PostgresStore, pg_url: str
) -> None:
    turn_id = await _running_turn(store, "other-host:1:1")

    def renewed_meanwhile(owner: str) -> bool:
        # Another worker renews the lease after the scan read it: the turn is not an orphan.
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("UPDATE turns SET lease_expires_at = lease_expires_at + 60")
        return False

    assert await store.recover_orphans(renewed_meanwhile) == []
    assert await store.recover_orphans(lambda owner: False) == [turn_id]


async def test_recovery_skips_a_turn_locked_by_another_transaction(
    store: PostgresStore, pg_url: str
) -> None:
    turn_id = await _running_turn(store, dead_process())
    with psycopg.connect(pg_url) as conn:  # a transaction renewing the lease right now
        conn.execute("SELECT 1 FROM turns WHERE id = %s FOR NO KEY UPDATE", (turn_id,))
        # (A recovery that waited for the lock would wait for ever: this thread holds it.)
        assert await asyncio.wait_for(store.recover_orphans(), timeout=20) == []
    assert await store.recover_orphans() == [turn_id]


async def test_a_write_cancelled_while_it_waits_for_a_lock_completes(
    store: PostgresStore, pg_url: str
) -> None:
    session = await store.create_session(workdir="/w", model="m")
    with psycopg.connect(pg_url) as conn:  # holds the session's lock: the write cannot commit
        conn.execute("SELECT 1 FROM sessions WHERE id = %s FOR UPDATE", (session.id,))
        task = asyncio.create_task(append_event(store, session.id, None, {"type": "kept"}))
        await asyncio.sleep(0)  # one step: the write is handed to the store
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert [e.type for e in await store.events_after(session.id)] == ["kept"]


_KILLED = """
import asyncio, os, socket, sys
from drover.core.messages import user_message
from drover.journal.writes import AppendPartialText, UpsertToolCall
from drover.store.postgres.store import PostgresStore

async def main():
    with open(f"/proc/{os.getpid()}/stat") as f:
        start = f.read().rsplit(")", 1)[1].split()[19]
    owner = f"{socket.gethostname()}:{os.getpid()}:{start}"
    store = PostgresStore(sys.argv[1])
    await store.open()
    await store.create_session(session_id="s", workdir="/w", model="m")
    turn = await store.begin_turn("s", user_message("clean up"), owner, 3600)
    await store.write_batch([AppendPartialText(turn.id, 1, 0, "Deleting the build directory")])
    rm = UpsertToolCall(turn_id=turn.id, call_id="rm", call_index=0, name="bash", state="running")
    await store.write_batch([rm])
    print("running", flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


async def test_a_killed_processs_turn_is_recovered(pg_url: str) -> None:
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _KILLED, pg_url, stdout=subprocess.PIPE
    )
    assert child.stdout is not None
    assert await asyncio.wait_for(child.stdout.readline(), timeout=30) == b"running\n"
    child.send_signal(signal.SIGKILL)
    await child.wait()

    async with PostgresStore(pg_url) as store:
        # The lease has an hour to run, but its owner is dead.
        (turn_id,) = await store.recover_orphans()
        (call,) = await store.tool_calls(turn_id)
        (message,) = await store.turn_messages(turn_id)
        events = await store.events_after("s")
    assert (call.state, call.outcome_unknown) == ("interrupted", True)
    assert message.partial
    assert message.message.text == "Deleting the build directory"
    assert [e.type for e in events] == [
        "text_delta",
        "tool_state",
        "assistant_message",
        "incomplete",
    ]
    assert [e.seq for e in events] == [1, 2, 3, 4]


# -- schema ----------------------------------------------------------------------------------


def test_migration_names_match_sqlite() -> None:
    assert [m.name for m in PG_MIGRATIONS] == [m.name for m in SQLITE_MIGRATIONS]


async def test_migrations_are_recorded_and_idempotent(pg_url: str) -> None:
    async with PostgresStore(pg_url) as store:
        session = await store.create_session(workdir="/w", model="m")
    async with PostgresStore(pg_url) as store:  # reopening applies nothing and keeps the data
        assert await store.get_session(session.id) == session
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        assert await applied_migrations(conn) == [m.name for m in PG_MIGRATIONS]
        assert await migrate(conn, 0.0) == []


async def test_migrations_apply_in_order_from_an_older_schema(pg_url: str) -> None:
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        assert await applied_migrations(conn) == []
        assert await migrate(conn, 1.0, PG_MIGRATIONS[:1]) == [PG_MIGRATIONS[0].name]
        assert await migrate(conn, 2.0) == [m.name for m in PG_MIGRATIONS[1:]]
        assert await applied_migrations(conn) == [m.name for m in PG_MIGRATIONS]


async def test_concurrent_first_opens_of_an_empty_database(pg_cluster: pg.PgCluster) -> None:
    url = pg_cluster.new_database()  # a database of its own: migrations lock database-wide
    stores = [PostgresStore(url) for _ in range(4)]
    await asyncio.gather(*(s.open() for s in stores))
    await asyncio.gather(*(s.close() for s in stores))
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        assert await applied_migrations(conn) == [m.name for m in PG_MIGRATIONS]
    pg_cluster.drop_database(url)


# -- connecting ------------------------------------------------------------------------------


async def _open_error(url: str) -> str:
    store = PostgresStore(url)
    with pytest.raises(StoreError) as info:
        await store.open()
    message = str(info.value)
    assert "\n" not in message
    assert "s3cr" not in message
    with pytest.raises(StoreError, match="not open"):
        await store.list_sessions()
    return message


async def test_connection_errors_are_one_line_without_the_password(
    pg_cluster: pg.PgCluster,
) -> None:
    port = free_port()
    message = await _open_error(f"postgresql://me:s3cret@127.0.0.1:{port}/db")
    assert message == f"cannot connect to PostgreSQL at 127.0.0.1:{port}: Connection refused"
    message = await _open_error(pg_cluster.url("no_such_db").replace("@", ":s3cret@"))
    assert message.startswith(f"cannot connect to PostgreSQL at 127.0.0.1:{pg_cluster.port}: ")
    assert 'database "no_such_db" does not exist' in message


@pytest.mark.parametrize(
    "url",
    ["postgresql://me:s3 cret@localhost/db", "postgresql://me:s3cret@localhost/db?bogus=1"],
)
async def test_bad_urls_are_one_line_errors_without_the_password(url: str) -> None:
    assert (await _open_error(url)).startswith("invalid PostgreSQL URL: ")


def test_open_store_picks_postgres() -> None:
    for url in ("postgresql://me:s3cret@db.example/drover", "postgres://db.example/drover"):
        store = open_store(url)
        assert isinstance(store, PostgresStore)
        assert "s3cret" not in repr(store)


async def test_query_errors_are_one_line_store_errors(store: PostgresStore) -> None:
    with pytest.raises(StoreError, match=r"^journal error: [^\n]*NUL") as info:
        await store.create_session(session_id="a\x00b", workdir="/w", model="m")
    assert "\n" not in str(info.value)


# -- what PostgreSQL cannot store ------------------------------------------------------------


async def test_nul_characters_become_replacement_characters(store: PostgresStore) -> None:
    session = await store.create_session(workdir="/w", model="m")
    turn = await store.begin_turn(session.id, user_message("run\x00this"), "h:1:1", 30)
    await append_partial_text(store, turn.id, 1, 0, "bin\x00ary")
    await upsert_tool_call(
        store, turn.id, "c", call_index=0, name="bash", state="output-available", output="a\x00b"
    )
    # A backslash before "u0000" is text, not a NUL: it is kept as written.
    await append_event(store, session.id, turn.id, {"type": "x", "text": "\\u0000 and \\\x00"})
    await end_turn(store, turn.id, "failed", error="boom\x00")

    (stored,) = await store.turns(session.id)
    assert stored.user_message == user_message("run\ufffdthis")
    assert stored.error == "boom\ufffd"
    (message,) = await store.turn_messages(turn.id)
    assert message.message.content == (TextBlock(text="bin\ufffdary", partial=True),)
    (call,) = await store.tool_calls(turn.id)
    assert call.output == "a\ufffdb"
    events = await store.events_after(session.id)
    assert events[0].payload["text"] == "bin\ufffdary"
    assert events[1].payload["text"] == "\\u0000 and \\\ufffd"
