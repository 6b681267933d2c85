"""The least a tool step's durability can cost on this SQLite build, beside drover's cost.

A step of ``loop_overhead.py`` (~200 characters of streamed text, one call of a no-op tool)
leaves these rows, in three commits:

1. the eager flush of the step's text with the call's first state: one ``partial_text`` row,
   one ``tool_calls`` insert, two log rows;
2. the assistant message with its rows and the call set running: the message, the text rows
   moved into the log (one folded row), the call's state twice, five log rows;
3. the call's end and its results: the call's state, the results message, four log rows.

That is 11 log rows, 4 ``tool_calls`` writes, 2 messages and one text row written and deleted
(the counts and sizes drover's journal writes per step). The **floor** makes exactly those
writes straight on :mod:`sqlite3`, in one thread, with drover's pragmas (WAL,
``synchronous=NORMAL``, 1 KiB pages, incremental auto-vacuum, foreign keys), each transaction a
``BEGIN IMMEDIATE … COMMIT``, every statement a constant string (the driver's statement cache
prepares each once), every parameter built before the clock starts: what is left is SQLite's
own work. No drover code runs in it. It runs on two schemas: drover's tables as they are
(``schema``: the same keys, foreign keys and index), and the bare minimum (``bare``: each table
keyed as it must be looked up, no foreign keys, no secondary index).

**drover** is the store's CPU time per step in the real loop (``loop_overhead.py``'s "on" run:
the Chat Completions provider, the fake server in its own process): the thread time spent
inside the store's calls — on its worker (``SqliteConnection._run``) and the writes made on the
calling thread (``_begin_here``, ``_finish_here``) — summed over the turn, divided by the model
calls (steps + 1). Both figures are thread CPU time; runs alternate.

    .venv/bin/python bench/store_floor.py                # --steps 200 --runs 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from common import drover_provider, forbid_network, median, print_environment, table
from fakeserver import FakeServerProcess
from loop_overhead import one_run

PRAGMAS = (
    "PRAGMA page_size = 1024",
    "PRAGMA auto_vacuum = INCREMENTAL",
    "PRAGMA journal_mode = WAL",
    "PRAGMA synchronous = NORMAL",
    "PRAGMA foreign_keys = ON",
)

#: drover's tables (``schema``), as its migrations leave them.
SCHEMA = """
CREATE TABLE sessions (id TEXT PRIMARY KEY, created_at REAL NOT NULL, updated_at REAL NOT NULL,
    workdir TEXT NOT NULL, model TEXT NOT NULL, title TEXT,
    seq_reserved INTEGER NOT NULL DEFAULT 0, owner TEXT);
CREATE TABLE turns (id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq INTEGER NOT NULL, status TEXT NOT NULL, owner TEXT, created_at REAL NOT NULL,
    UNIQUE (session_id, seq));
CREATE TABLE messages (turn_id TEXT NOT NULL REFERENCES turns (id) ON DELETE CASCADE,
    seq INTEGER NOT NULL, role TEXT NOT NULL, body TEXT NOT NULL,
    partial INTEGER NOT NULL DEFAULT 0, created_at REAL NOT NULL,
    PRIMARY KEY (turn_id, seq)) WITHOUT ROWID;
CREATE TABLE tool_calls (turn_id TEXT NOT NULL REFERENCES turns (id) ON DELETE CASCADE,
    call_id TEXT NOT NULL, step INTEGER NOT NULL DEFAULT 0, call_index INTEGER NOT NULL,
    name TEXT NOT NULL, state TEXT NOT NULL, input TEXT, output TEXT,
    is_error INTEGER NOT NULL DEFAULT 0, outcome_unknown INTEGER NOT NULL DEFAULT 0,
    read_only INTEGER NOT NULL DEFAULT 0, created_at REAL NOT NULL, updated_at REAL NOT NULL,
    PRIMARY KEY (turn_id, call_id)) WITHOUT ROWID;
CREATE TABLE events (session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq INTEGER NOT NULL, part INTEGER NOT NULL DEFAULT 0, last_seq INTEGER NOT NULL,
    turn_id TEXT, type TEXT NOT NULL, payload TEXT NOT NULL, marks TEXT,
    created_at REAL NOT NULL, PRIMARY KEY (session_id, seq, part)) WITHOUT ROWID;
CREATE INDEX events_by_last_seq ON events (session_id, last_seq);
CREATE TABLE partial_text (id INTEGER PRIMARY KEY,
    turn_id TEXT NOT NULL REFERENCES turns (id) ON DELETE CASCADE, session_id TEXT NOT NULL,
    step INTEGER NOT NULL, block_index INTEGER NOT NULL, seq INTEGER, last_seq INTEGER,
    marks TEXT, text TEXT NOT NULL, created_at REAL NOT NULL);
"""


def bare(schema: str) -> str:
    """The same tables with no foreign key and no secondary index."""
    lines = [line for line in schema.splitlines() if not line.startswith("CREATE INDEX")]
    return (
        "\n".join(lines)
        .replace(" REFERENCES sessions (id) ON DELETE CASCADE", "")
        .replace(" REFERENCES turns (id) ON DELETE CASCADE", "")
    )


SCHEMAS = {"schema": SCHEMA, "bare": bare(SCHEMA)}

EVENT = (
    "INSERT INTO events (session_id, seq, part, turn_id, type, payload, created_at, last_seq, "
    "marks) VALUES (?, ?, 0, ?, ?, ?, ?, ?, ?)"
)
CALL_INSERT = (
    "INSERT INTO tool_calls (turn_id, call_id, step, call_index, name, state, input, output, "
    "is_error, outcome_unknown, read_only, created_at, updated_at) "
    "VALUES (?, ?, ?, 0, 'ping', ?, NULL, NULL, 0, 0, 1, ?, ?)"
)
CALL_UPDATE = (
    "UPDATE tool_calls SET state = ?, input = COALESCE(?, input), output = COALESCE(?, output), "
    "updated_at = ? WHERE turn_id = ? AND call_id = ?"
)
MESSAGE = (
    "INSERT INTO messages (turn_id, seq, role, body, partial, created_at) VALUES (?, ?, ?, ?, 0, ?)"
)
TEXT = (
    "INSERT INTO partial_text (turn_id, session_id, step, block_index, seq, last_seq, marks, "
    "text, created_at) VALUES (?, ?, ?, 0, ?, ?, ?, ?, ?)"
)
TEXT_DELETE = "DELETE FROM partial_text WHERE turn_id = ? AND step = ?"

Statement = tuple[str, tuple[Any, ...]]
Transaction = list[Statement]

SESSION, TURN = "5" * 32, "7" * 32


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def step_writes(step: int, first_seq: int, now: float) -> tuple[list[Transaction], int]:
    """The three transactions of one step (sizes as drover writes them) and the next number."""
    seq = first_seq
    call = f"call_fake{step:020d}"
    text = ("lorem ipsum dolor sit amet " * 8)[:200]
    deltas = 25
    marks = dumps([1, 8] * deltas)
    text_first, text_last = seq + 1, seq + deltas
    numbers = iter(range(text_last + 1, text_last + 100))

    def event(kind: str, payload: dict[str, Any], at: int | None = None) -> Statement:
        n = next(numbers) if at is None else at
        body = dumps({"type": kind, **payload})
        return EVENT, (SESSION, n, TURN, kind, body, now, n, None)

    state = {"call_id": call, "call_index": 0, "name": "ping"}
    msg_seq = 2 * step + 1
    assistant = dumps(
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": text},
                {"type": "tool_use", "id": call, "name": "ping", "input": {"n": step}},
            ],
        }
    )
    results = dumps(
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call, "content": f"pong {step}"}],
        }
    )
    usage = {"usage": {"input_tokens": 437, "output_tokens": 52, "cache_read_tokens": 0}}
    first: Transaction = [
        event("step_started", {"step": step}, at=seq),
        (TEXT, (TURN, SESSION, step, text_first, text_last, marks, text, now)),
        (CALL_INSERT, (TURN, call, step, "input-streaming", now, now)),
        event("tool_state", {**state, "state": "input-streaming"}),
    ]
    folded = {"text_at": [msg_seq, 0, 200], "index": 0, "step": step}
    second: Transaction = [
        (CALL_UPDATE, ("input-available", dumps({"n": step}), None, now, TURN, call)),
        event("tool_state", {**state, "state": "input-available", "input": {"n": step}}),
        event("usage", usage),
        (MESSAGE, (TURN, msg_seq, "assistant", assistant, now)),
        (TEXT_DELETE, (TURN, step)),
        (EVENT, (SESSION, text_first, TURN, "text_delta", dumps(folded), now, text_last, marks)),
        event("assistant_message", {"message_of": msg_seq, "partial": False}),
        (CALL_UPDATE, ("running", None, None, now, TURN, call)),
        event("tool_state", {**state, "state": "running", "input": {"n": step}}),
    ]
    third: Transaction = [
        event("tool_start", {"call_index": 0, "id": call, "name": "ping"}),
        (CALL_UPDATE, ("output-available", None, f"pong {step}", now, TURN, call)),
        event("tool_state", {**state, "state": "output-available", "output": f"pong {step}"}),
        (MESSAGE, (TURN, msg_seq + 1, "user", results, now)),
        event("tool_done", {"call_index": 0, "id": call, "is_error": False}),
        event("tool_results", {"message_of": msg_seq + 1}),
    ]
    return [first, second, third], next(numbers)


def floor_run(path: Path, schema: str, steps: int) -> tuple[float, int, int]:
    """µs of thread CPU per step, commits and statements per step, for ``steps`` steps."""
    conn = sqlite3.connect(path, isolation_level=None)
    for pragma in PRAGMAS:
        conn.execute(pragma)
    conn.executescript(schema)
    now = time.time()
    conn.execute(
        "INSERT INTO sessions (id, created_at, updated_at, workdir, model) "
        "VALUES (?, ?, ?, '/w', 'm')",
        (SESSION, now, now),
    )
    conn.execute(
        "INSERT INTO turns (id, session_id, seq, status, owner, created_at) "
        "VALUES (?, ?, 1, 'running', 'o', ?)",
        (TURN, SESSION, now),
    )
    plan: list[Transaction] = []
    seq = 1
    for step in range(steps):
        transactions, seq = step_writes(step, seq, now)
        plan += transactions
    statements = sum(len(t) + 2 for t in plan)
    execute = conn.execute
    started = time.thread_time()
    for transaction in plan:
        execute("BEGIN IMMEDIATE")
        for sql, params in transaction:
            execute(sql, params)
        execute("COMMIT")
    spent = time.thread_time() - started
    (events,) = conn.execute("SELECT COUNT(*) FROM events").fetchone()
    conn.close()
    if events != 11 * steps:
        raise RuntimeError(f"the floor wrote {events} log rows, not {11 * steps}")
    return 1e6 * spent / steps, len(plan) // steps, statements // steps


def floor_in_thread(path: Path, schema: str, steps: int) -> tuple[float, int, int]:
    """:func:`floor_run` in a thread of its own (like the store's worker)."""
    out: list[tuple[float, int, int]] = []
    worker = threading.Thread(target=lambda: out.append(floor_run(path, schema, steps)))
    worker.start()
    worker.join()
    return out[0]


class StoreThreadClock:
    """Sums the thread CPU time the store spends inside its calls: those its worker runs
    (``_run``) and the writes made on the calling thread (``_begin_here``, ``_finish_here``)."""

    def __init__(self) -> None:
        self.spent = 0.0
        self.calls = 0

    def install(self) -> None:
        from drover.store.sqlite.connection import SqliteConnection

        for name, counted in (("_run", True), ("_begin_here", False), ("_finish_here", True)):
            setattr(SqliteConnection, name, self._timed(getattr(SqliteConnection, name), counted))

    def _timed(self, method: Callable[..., Any], counted: bool) -> Callable[..., Any]:
        clock = self

        def timed(*args: Any) -> Any:
            started = time.thread_time()
            try:
                return method(*args)
            finally:
                clock.spent += time.thread_time() - started
                clock.calls += counted

        return timed

    def take(self) -> tuple[float, int]:
        spent, calls, self.spent, self.calls = self.spent, self.calls, 0.0, 0
        return spent, calls


def paths(root: Path) -> Iterator[Path]:
    n = 0
    while True:
        n += 1
        yield root / f"floor-{n}.db"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs of each")
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    forbid_network()
    clock = StoreThreadClock()
    clock.install()
    with (
        tempfile.TemporaryDirectory(prefix="drover-floor-") as tmp,
        FakeServerProcess() as fake,
    ):
        workdir = Path(tmp)
        print_environment(
            "bench/store_floor.py — a tool step's durability: floor vs drover", workdir
        )
        print(f"SQLite {sqlite3.sqlite_version}; {args.steps} steps per run, {args.runs} runs each")
        provider = drover_provider("openai", fake.openai_base_url)
        new_path = paths(workdir)
        results: dict[str, list[float]] = {"schema": [], "bare": [], "drover": []}
        shape: dict[str, tuple[int, int]] = {}
        calls_per_step = 0.0
        try:
            await one_run("on", fake, provider, args.steps, workdir, 0)  # warm-up
            clock.take()
            for i in range(args.runs + 1):
                for name, schema in SCHEMAS.items():
                    us, commits, statements = floor_in_thread(next(new_path), schema, args.steps)
                    shape[name] = (commits, statements)
                    if i:
                        results[name].append(us)
                await one_run("on", fake, provider, args.steps, workdir, i + 1)
                spent, calls = clock.take()
                if i:
                    results["drover"].append(1e6 * spent / (args.steps + 1))
                    calls_per_step = calls / (args.steps + 1)
                print(
                    f"  run {i}{' (warm-up)' if not i else ''}: "
                    + "  ".join(f"{k} {v[-1]:.0f} µs" for k, v in results.items() if v and i),
                    flush=True,
                )
        finally:
            await provider.aclose()
    schema_us = median(results["schema"])
    rows = [
        [
            "floor, bare tables",
            f"{median(results['bare']):.0f} µs",
            *(str(x) for x in shape["bare"]),
        ],
        ["floor, drover's schema", f"{schema_us:.0f} µs", *(str(x) for x in shape["schema"])],
        ["drover's store thread", f"{median(results['drover']):.0f} µs", "—", "—"],
    ]
    print()
    print(table(["per tool step", "thread CPU (median)", "commits", "statements"], rows))
    drover_us = median(results["drover"])
    print()
    print(f"drover ÷ floor (drover's schema): {drover_us / schema_us:.2f}")
    print(f"drover − floor (drover's schema): {drover_us - schema_us:.0f} µs per step")
    print(f"store calls per step (drover):    {calls_per_step:.2f}")


if __name__ == "__main__":
    asyncio.run(main())
