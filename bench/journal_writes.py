"""What the journal costs while an answer streams: writes, bytes and time (issue #5, figure 1).

An answer of 10 KiB, 100 KiB or 1 MiB is streamed as text deltas through the real
:class:`drover.journal.Journal` into a real :class:`drover.store.SqliteStore` (a fresh file in a
temp directory), with the real gates (250 ms / 1024 B), then ended as a real turn would be: the
authoritative ``assistant_message``, ``done``, ``aclose``.

Time is a deterministic fake clock handed to the journal (``clock=`` and ``sleep=``): it moves
forward by one delta's worth before each delta, at a fixed token rate, so a 1 MiB answer that
would stream for 55 minutes runs in seconds and the gates see exactly the time they would see
live. Two rates: *typical* (8-byte deltas, 320 B/s ≈ 80 tokens/s) where the 250 ms gate decides,
and *fast* (32-byte deltas, 8 KB/s ≈ 2,000 tokens/s) where the 1024 B gate decides.

Per row: write transactions (SQLite commits, counted by tracing every statement — see
:class:`common.CommitCounter`), of which while streaming; transactions per second of streamed
time; bytes written per byte streamed, measured twice — by the database files (growth of the
``.db`` after ``wal_checkpoint(TRUNCATE)``: what stays stored) and by ``/proc/self/io``
(``write_bytes``: what the process sent to the storage layer, WAL frames and checkpoints
included; ``wchar``: bytes passed to write calls); and the wall time the whole run took.

    .venv/bin/python bench/journal_writes.py
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import itertools
import sqlite3
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from common import (
    CommitCounter,
    checkpointed_size,
    db_files_size,
    forbid_network,
    human_bytes,
    io_delta,
    print_environment,
    proc_io,
    table,
    words,
)

from drover.core.events import AssistantMessage, Done, StepStarted, TextDelta, TurnStarted
from drover.core.messages import TextBlock, Usage, assistant_message, user_message
from drover.journal import Journal
from drover.runtime.runner import owner_id
from drover.store import SqliteStore

KIB = 1024
SIZES = (10 * KIB, 100 * KIB, 1024 * KIB)


@dataclass(frozen=True, slots=True)
class Rate:
    name: str
    delta_bytes: int
    bytes_per_second: float

    @property
    def seconds_per_delta(self) -> float:
        return self.delta_bytes / self.bytes_per_second


RATES = (
    Rate("typical", 8, 320.0),  # ~80 tokens/s at ~4 bytes a token
    Rate("fast", 32, 8000.0),  # ~2,000 tokens/s
)


class FakeClock:
    """Monotonic time that moves only when told; ``sleep`` waits for the clock to pass."""

    def __init__(self) -> None:
        self.now = 0.0
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._ids = itertools.count()

    def time(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self.now + seconds, next(self._ids), future))
        await future

    def advance(self, seconds: float) -> bool:
        """Move time on; True when a sleeper woke (let it run before going on)."""
        self.now += seconds
        woke = False
        while self._sleepers and self._sleepers[0][0] <= self.now:
            _, _, future = heapq.heappop(self._sleepers)
            if not future.done():
                future.set_result(None)
                woke = True
        return woke


@dataclass(frozen=True, slots=True)
class Row:
    size: int
    rate: Rate
    deltas: int
    stream_seconds: float
    flushes: int
    commits_streaming: int
    commits_total: int
    stored_bytes: int
    live_bytes: int
    wal_peak: int
    io: dict[str, int]
    wall: float
    #: Time of the end of the answer: the message (its text rows folded in), ``done``, close.
    final: float
    #: Bytes of the pages each table and index holds at the end (``dbstat``), all rows.
    by_table: dict[str, int]


def _count(path: Path, sql: str) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute(sql).fetchone()[0])
    finally:
        conn.close()


def _by_table(path: Path) -> dict[str, int]:
    """Bytes of the pages each table or index occupies (``dbstat``; empty when SQLite was
    built without it)."""
    conn = sqlite3.connect(path)
    try:
        found = conn.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name").fetchall()
    except sqlite3.OperationalError:
        return {}
    finally:
        conn.close()
    return {str(name): int(size) for name, size in found}


def _live_bytes(path: Path) -> int:
    """Bytes of the pages in use (the file less its free-list pages)."""
    pages = _count(path, "PRAGMA page_count") - _count(path, "PRAGMA freelist_count")
    return pages * _count(path, "PRAGMA page_size")


async def stream_answer(
    size: int, rate: Rate, workdir: Path, counter: CommitCounter, page_size: int | None = None
) -> Row:
    path = workdir / f"journal-{size}-{rate.name}.db"
    if page_size is not None:  # an empty file takes the page size its first table is made with
        conn = sqlite3.connect(path)
        conn.execute(f"PRAGMA page_size = {int(page_size)}")
        conn.execute("VACUUM")
        conn.close()
    text = words(size, seed=size)
    chunks = [text[i : i + rate.delta_bytes] for i in range(0, len(text), rate.delta_bytes)]
    with counter.watching():
        store = SqliteStore(path)
        await store.open()
    try:
        session = await store.create_session(workdir=str(workdir), model="bench:journal")
        turn = await store.begin_turn(session.id, user_message("write it"), owner_id(), 3600.0)
        clock = FakeClock()
        journal = Journal(store, session.id, clock=clock.time, sleep=clock.sleep)
        await journal.send(TurnStarted(turn_id=turn.id, session_id=session.id, user_message=None))
        await journal.send(StepStarted(step=1))
        base_size, base_live = checkpointed_size(path), _live_bytes(path)
        io_before, commits_before = proc_io(), counter.counts(path).commits
        started = time.perf_counter()
        for chunk in chunks:
            if clock.advance(rate.seconds_per_delta):
                await asyncio.sleep(0)  # the woken flush timer takes its text first
            await journal.send(TextDelta(text=chunk, index=0))
        commits_streaming = counter.counts(path).commits - commits_before
        flushes = _count(path, "SELECT COUNT(*) FROM partial_text")
        final_started = time.perf_counter()
        message = assistant_message([TextBlock(text=text)])
        await journal.send(AssistantMessage(message=message))
        await journal.send(Done(text=text, usage=Usage()))
        await journal.aclose()
        final = time.perf_counter() - final_started
        wall = time.perf_counter() - started
        io = io_delta(io_before, proc_io())
        commits_total = counter.counts(path).commits - commits_before
        if journal.backlog:
            raise RuntimeError(f"journal left {journal.backlog} writes unmade")
        wal_peak = db_files_size(path)[1]  # before close: closing checkpoints and drops it
    finally:
        await store.close()
    stored = checkpointed_size(path) - base_size
    live = _live_bytes(path) - base_live
    return Row(
        size=size,
        rate=rate,
        deltas=len(chunks),
        stream_seconds=len(chunks) * rate.seconds_per_delta,
        flushes=flushes,
        commits_streaming=commits_streaming,
        commits_total=commits_total,
        stored_bytes=stored,
        live_bytes=live,
        wal_peak=wal_peak,
        io=io,
        wall=wall,
        final=final,
        by_table=_by_table(path),
    )


def _ratio(n: int | None, size: int) -> str:
    return "n/a" if n is None else f"{n / size:.2f}"


def report(rows: list[Row]) -> None:
    headers = [
        "answer",
        "rate",
        "deltas",
        "streamed",
        "flushes",
        "writes (stream/total)",
        "tx/s",
        "file÷n",
        "in use÷n",
        "write_bytes÷n",
        "wchar÷n",
        "WAL at end",
        "wall",
        "wall/write",
        "final",
    ]
    body = []
    for r in rows:
        write_bytes = r.io.get("write_bytes") if r.io else None
        wchar = r.io.get("wchar") if r.io else None
        body.append(
            [
                human_bytes(r.size),
                f"{r.rate.name} {r.rate.bytes_per_second:.0f} B/s",
                r.deltas,
                f"{r.stream_seconds:.0f} s",
                r.flushes,
                f"{r.commits_streaming}/{r.commits_total}",
                f"{r.commits_total / r.stream_seconds:.2f}",
                _ratio(r.stored_bytes, r.size),
                _ratio(r.live_bytes, r.size),
                _ratio(write_bytes, r.size),
                _ratio(wchar, r.size),
                human_bytes(r.wal_peak),
                f"{r.wall:.2f} s",
                f"{1000 * r.wall / max(1, r.commits_total):.2f} ms",
                f"{1000 * r.final:.0f} ms",
            ]
        )
    print(table(headers, body))
    print()
    print("answer      text streamed as deltas of the rate's size; n = its bytes")
    print("streamed    the fake clock's duration of the stream (deltas × delta size ÷ rate)")
    print("flushes     partial-text writes (coalesced text_delta rows in the log before the")
    print("            message; the message folds them into one row per block)")
    print("writes      SQLite commits while streaming / in all, counting the final message,")
    print("            the turn's end and the event log (traced COMMIT statements)")
    print("tx/s        commits ÷ streamed seconds: the load one live stream puts on the database")
    print("file÷n      growth of the .db file after wal_checkpoint(TRUNCATE), ÷ n")
    print("in use÷n    growth of its pages in use (page_count - freelist_count), ÷ n")
    print("write_bytes /proc/self/io write_bytes during the run (WAL + checkpoints), ÷ n")
    print("wchar       /proc/self/io wchar during the run (all write calls), ÷ n")
    print("WAL at end  size of the -wal file at the end of the run, before the store closed")
    print("            (reused after each ~1000-page auto-checkpoint; journal_size_limit truncates")
    print("            it to 4 MB after a checkpoint when a big transaction grew it past that)")
    print("wall        real time of the run: deltas through the journal, the final writes")
    print("final       real time of the end: the message (the fold of its text rows), done, close")
    print()
    print("Where the bytes are at the end (dbstat: pages of each table and index ÷ n, the")
    print("session's and turn's rows included; tables under 0.01 n left out):")
    names = sorted({name for r in rows for name in r.by_table})
    shown = [n for n in names if any(r.by_table.get(n, 0) / r.size >= 0.01 for r in rows)]
    if not shown:
        print("  (dbstat is not available in this SQLite build)")
        return
    print(
        table(
            ["answer", "rate", *shown],
            [
                [human_bytes(r.size), r.rate.name]
                + [_ratio(r.by_table.get(n, 0), r.size) for n in shown]
                for r in rows
            ],
        )
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=list(SIZES), help="bytes")
    parser.add_argument("--dir", type=Path, default=None, help="where the databases go")
    parser.add_argument(
        "--page-size", type=int, default=None, help="SQLite page size of the new files"
    )
    args = parser.parse_args()
    forbid_network()
    counter = CommitCounter()
    counter.install()
    with tempfile.TemporaryDirectory(prefix="drover-bench-", dir=args.dir) as tmp:
        workdir = Path(tmp)
        print_environment("bench/journal_writes.py — journal writes per streamed answer", workdir)
        if args.page_size:
            print(f"page size: {args.page_size} B (SQLite's default: 4096)")
        print(
            "clock: deterministic fake clock, advanced by one delta's duration before each "
            "delta; gates 250 ms / 1024 B (the Journal defaults)"
        )
        if proc_io() is None:
            print("/proc/self/io: not available here; only file sizes are reported")
        print()
        rows = []
        for rate in RATES:
            for size in args.sizes:
                rows.append(await stream_answer(size, rate, workdir, counter, args.page_size))
                print(f"  ran {human_bytes(size)} at the {rate.name} rate", flush=True)
        print()
        report(rows)


if __name__ == "__main__":
    asyncio.run(main())
