"""Retention at scale: time to prune 10,000 sessions, and the journal's size before and after.

A SQLite journal of ``--prune + --keep`` sessions is built as ``admin_scale.py`` builds one (one
real tool-using turn recorded through the store, copied with SQL under new ids, an hour apart),
then pruned down to the ``--keep`` newest (``keep_last``) — in this process through the library
(:func:`drover.journal.retention.prune`, transactions sized to ~150 ms, 110 ms apart)
while a live turn on a kept session writes one event every 5 ms, whose slowest write shows
what a batch makes a live turn wait. Then the same prune again as ``drover gc`` (a new
process, start-up included) on a fresh copy. Printed: sessions pruned, seconds, sessions/s,
the journal's file size before and after (``-wal`` included, after the store closed), and the
live writes' latency (median, max).

    .venv/bin/python bench/gc.py                     # --prune 10000 --keep 1000
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from admin_scale import copy_sessions, record_one
from common import REPO, median, print_environment, src_env, table

from drover.journal.retention import GAP_SECONDS, STEP_SECONDS, Policy, prune
from drover.journal.writes import AppendEvent, EndTurn
from drover.messages import user_message
from drover.store import SqliteStore


def file_bytes(db: Path) -> int:
    return sum(p.stat().st_size for p in (db, Path(f"{db}-wal")) if p.exists())


def mb(count: float) -> str:
    return f"{count / 1_000_000:.1f} MB"


async def live_writer(db: Path, session_id: str, stop: asyncio.Event) -> list[float]:
    """A turn writing one event every 5 ms until ``stop``; each write's latency (seconds)."""
    latencies: list[float] = []
    async with SqliteStore(db) as store:
        turn = await store.begin_turn(session_id, user_message("live"), "bench:1:1", 600)
        while not stop.is_set():
            start = time.perf_counter()
            event = {"type": "note", "text": "x" * 64}
            await store.write_batch([AppendEvent(session_id, turn.id, event)])
            latencies.append(time.perf_counter() - start)
            await asyncio.sleep(0.005)
        await store.write_batch([EndTurn(turn_id=turn.id, status="completed")])
    return latencies


async def library_prune(db: Path, keep: int, live: str) -> tuple[int, float, list[float]]:
    stop = asyncio.Event()
    writer = asyncio.create_task(live_writer(db, live, stop))
    await asyncio.sleep(0.05)  # the live turn is writing
    async with SqliteStore(db) as store:
        report = await prune(store, Policy(older_than=0, keep_last=keep))
    stop.set()
    return report.sessions, report.seconds, await writer


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
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="drover-gc-bench-") as tmp:
        print_environment("retention: prune old sessions", Path(tmp))
        built = Path(tmp) / "built.db"
        source = asyncio.run(record_one(built))
        newest, _ = copy_sessions(built, source, args.prune + args.keep)
        size_built = file_bytes(built)

        db = Path(tmp) / "library.db"
        shutil.copy(built, db)
        pruned, seconds, latencies = asyncio.run(library_prune(db, args.keep, newest))
        size_library = file_bytes(db)

        db = Path(tmp) / "cli.db"
        shutil.copy(built, db)
        wall, said = cli_prune(db, args.keep)
        size_cli = file_bytes(db)
    rows = [
        ["library prune()", f"{pruned:,}", f"{seconds:.2f} s", f"{pruned / seconds:,.0f}"],
        ["drover gc (process)", f"{args.prune:,}", f"{wall:.2f} s", f"{args.prune / wall:,.0f}"],
    ]
    print(table(["run", "sessions pruned", "time", "sessions/s"], rows))
    print()
    sizes = [
        ["before", mb(size_built)],
        ["after (library)", mb(size_library)],
        ["after (drover gc)", mb(size_cli)],
    ]
    print(table(["journal file (+ -wal)", "size"], sizes))
    print()
    print(
        f"transactions sized to ~{STEP_SECONDS * 1000:.0f} ms, {GAP_SECONDS * 1000:.0f} ms "
        "apart; "
        f"a live turn wrote {len(latencies)} events meanwhile:"
    )
    print(
        f"write latency median {median(latencies) * 1000:.1f} ms, "
        f"max {max(latencies) * 1000:.1f} ms"
    )
    print(f"drover gc said: {said}")


if __name__ == "__main__":
    main()
