"""Retention at scale: time to prune 10,000 sessions, and the journal's size before and after.

A SQLite journal of ``--prune + --keep`` sessions is built as ``admin_scale.py`` builds one (one
real tool-using turn recorded through the store, copied with SQL under new ids, an hour apart),
then pruned down to the ``--keep`` newest (``keep_last``) — in this process through the library
(:func:`drover.journal.retention.prune`, transactions sized to ~150 ms, 110 ms apart)
while a live turn on a kept session writes one event every 5 ms, whose slowest write shows
what a batch makes a live turn wait. Then the same prune again as ``drover gc`` (a new
process, start-up included) on a fresh copy. With ``--postgres`` the library prune again on a
throwaway PostgreSQL cluster, on sessions of about the same size made with SQL. Printed:
sessions pruned, seconds, sessions/s, the journal's size before and after (SQLite: the file
with its ``-wal``, after the store closed; PostgreSQL: its tables and indexes, which a DELETE
does not shrink: autovacuum makes the space reusable), and the live writes' latency (median,
max).

    .venv/bin/python bench/gc.py [--postgres]        # --prune 10000 --keep 1000
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from admin_scale import copy_sessions, record_one
from common import REPO, median, print_environment, src_env, table

from drover.core.messages import user_message
from drover.journal.retention import GAP_SECONDS, STEP_SECONDS, Policy, PruneReport, prune
from drover.journal.writes import AppendEvent, EndTurn
from drover.store import SqliteStore
from drover.store.postgres.store import PostgresStore
from drover.store.sql.store import SqlStore

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # support.pg


def file_bytes(db: Path) -> int:
    return sum(p.stat().st_size for p in (db, Path(f"{db}-wal")) if p.exists())


def mb(count: float) -> str:
    return f"{count / 1_000_000:.1f} MB"


async def live_writer(journal: Journal, session_id: str, stop: asyncio.Event) -> list[float]:
    """A turn writing one event every 5 ms until ``stop``; each write's latency (seconds)."""
    latencies: list[float] = []
    async with journal() as store:
        turn = await store.begin_turn(session_id, user_message("live"), "bench:1:1", 600)
        while not stop.is_set():
            start = time.perf_counter()
            event = {"type": "note", "text": "x" * 64}
            await store.write_batch([AppendEvent(session_id, turn.id, event)])
            latencies.append(time.perf_counter() - start)
            await asyncio.sleep(0.005)
        await store.write_batch([EndTurn(turn_id=turn.id, status="completed")])
    return latencies


async def library_prune(journal: Journal, keep: int, live: str) -> tuple[PruneReport, list[float]]:
    """Prune all but the ``keep`` newest sessions while a turn on ``live`` writes."""
    stop = asyncio.Event()
    writer = asyncio.create_task(live_writer(journal, live, stop))
    await asyncio.sleep(0.05)  # the live turn is writing
    async with journal() as store:
        report = await prune(store, Policy(older_than=0, keep_last=keep))
    stop.set()
    return report, await writer


#: A new store on the benchmark's journal.
Journal = Callable[[], SqlStore]

#: One session of the PostgreSQL run, made with SQL: a finished turn, four messages of ~1.5 KB
#: and 22 log rows of ~500 B (~17 KB of rows, about what admin_scale's recorded turn holds).
PG_BUILD = (
    "INSERT INTO sessions (id, created_at, updated_at, workdir, model) "
    "SELECT 's' || i, %(now)s - i * 3600, %(now)s - i * 3600, '/w', 'm' "
    "FROM generate_series(1, %(n)s) i",
    "INSERT INTO turns (id, session_id, seq, status, created_at, updated_at, ended_at) "
    "SELECT 't' || i, 's' || i, 1, 'completed', %(now)s - i * 3600, %(now)s - i * 3600, "
    "%(now)s - i * 3600 FROM generate_series(1, %(n)s) i",
    "INSERT INTO messages (turn_id, seq, role, body, created_at) "
    "SELECT 't' || i, m, 'assistant', jsonb_build_object('role', 'assistant', 'content', "
    "jsonb_build_array(jsonb_build_object('type', 'text', 'text', repeat(md5(i::text), 48)))), "
    "%(now)s FROM generate_series(1, %(n)s) i, generate_series(1, 4) m",
    "INSERT INTO events (session_id, seq, last_seq, type, payload, created_at) "
    "SELECT 's' || i, e, e, 'note', jsonb_build_object('type', 'note', 'text', "
    "repeat(md5((i * 100 + e)::text), 16)), %(now)s "
    "FROM generate_series(1, %(n)s) i, generate_series(1, 22) e",
    "ANALYZE",
)


def postgres_run(count: int, keep: int) -> tuple[PruneReport, list[float], int]:
    """The library prune on a PostgreSQL journal (a throwaway cluster); its report, the live
    writes' latencies and the journal's size after the build."""
    import psycopg
    from support import pg

    with pg.cluster() as cluster:
        url = cluster.new_database()
        asyncio.run(_migrated(url))
        with psycopg.connect(url, autocommit=True) as conn:
            for statement in PG_BUILD:
                conn.execute(statement, {"now": time.time(), "n": count})
        report, latencies = asyncio.run(library_prune(lambda: PostgresStore(url), keep, "s1"))
        return report, latencies, report.bytes_before


async def _migrated(url: str) -> None:
    async with PostgresStore(url):
        pass


def cli_prune(db: Path, keep: int) -> tuple[float, str]:
    start = time.perf_counter()
    argv = [sys.executable, "-m", "drover.cli.main", "gc", "--older-than", "0s"]
    argv += ["--keep-last", str(keep), "--db", str(db)]
    env = src_env(None)
    env["DROVER_CONFIG"] = "/nonexistent/drover-config.toml"  # the flags alone decide
    done = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, env=env)
    if done.returncode != 0:
        raise SystemExit(f"drover gc failed: {done.stderr.strip()}")
    return time.perf_counter() - start, done.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prune", type=int, default=10_000, help="sessions to prune")
    parser.add_argument("--keep", type=int, default=1_000, help="newest sessions kept")
    parser.add_argument(
        "--postgres", action="store_true", help="also on PostgreSQL (a throwaway cluster)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="drover-gc-bench-") as tmp:
        print_environment("retention: prune old sessions", Path(tmp))
        built = Path(tmp) / "built.db"
        source = asyncio.run(record_one(built))
        newest, _ = copy_sessions(built, source, args.prune + args.keep)
        size_built = file_bytes(built)

        db = Path(tmp) / "library.db"
        shutil.copy(built, db)
        report, latencies = asyncio.run(library_prune(lambda: SqliteStore(db), args.keep, newest))
        size_library = file_bytes(db)

        db = Path(tmp) / "cli.db"
        shutil.copy(built, db)
        wall, said = cli_prune(db, args.keep)
        size_cli = file_bytes(db)
    pruned, seconds = report.sessions, report.seconds
    rows = [
        ["SQLite: library prune()", f"{pruned:,}", f"{seconds:.2f} s", f"{pruned / seconds:,.0f}"],
        [
            "SQLite: drover gc (process)",
            f"{args.prune:,}",
            f"{wall:.2f} s",
            f"{args.prune / wall:,.0f}",
        ],
    ]
    sizes = [
        ["SQLite before", mb(size_built)],
        ["SQLite after (library)", mb(size_library)],
        ["SQLite after (drover gc)", mb(size_cli)],
    ]
    lags = [["SQLite", *_lag(latencies)]]
    if args.postgres:
        pg_report, pg_latencies, _ = postgres_run(args.prune + args.keep, args.keep)
        n, t = pg_report.sessions, pg_report.seconds
        rows.append(["PostgreSQL: library prune()", f"{n:,}", f"{t:.2f} s", f"{n / t:,.0f}"])
        sizes.append(["PostgreSQL before (tables + indexes)", mb(pg_report.bytes_before)])
        sizes.append(["PostgreSQL after", mb(pg_report.bytes_after)])
        lags.append(["PostgreSQL", *_lag(pg_latencies)])
    print(table(["run", "sessions pruned", "time", "sessions/s"], rows))
    print()
    print(table(["journal", "size"], sizes))
    print()
    print(
        f"transactions sized to ~{STEP_SECONDS * 1000:.0f} ms, {GAP_SECONDS * 1000:.0f} ms "
        "apart; a live turn writing an event every 5 ms meanwhile:"
    )
    print(table(["journal", "writes", "median", "max"], lags))
    print(f"drover gc said: {said}")


def _lag(latencies: list[float]) -> list[str]:
    return [
        str(len(latencies)),
        f"{median(latencies) * 1000:.1f} ms",
        f"{max(latencies) * 1000:.1f} ms",
    ]


if __name__ == "__main__":
    main()
