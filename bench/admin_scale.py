"""``drover sessions`` and ``drover show`` on a journal of many sessions (issue #12).

A journal of ``--sessions`` sessions (default 10,000) is built in a real SQLite file: one
session is recorded through the real store (a user prompt, three tool steps with their calls,
an answer, the event log of a real turn: coalesced text rows, tool states, the messages, the
terminal event), then copied with SQL under new ids and spread over time, so the file looks like
a long-used journal (~10 turns… no: one turn each, ~40 log rows each). Then, timed as the user
runs them — a new process each time, start-up included — ``drover sessions`` and ``drover show
ID`` (the newest session and the oldest), and the same calls in-process (the query part only).
Target: each ≤ 200 ms.

Each process is timed by the wall clock and by its CPU time (user + system, from ``wait4``;
the steadier figure on a shared machine). ``--before SRC`` measures another commit's ``src/``
beside this one, the runs of the two alternating. Python reads drover's modules from the
bytecode cache when it may write one; with ``PYTHONDONTWRITEBYTECODE`` set (as in this
project's sandbox; an editable install has no cache either) every run compiles drover's sources
again, ~25 ms of CPU. ``--bytecode`` gives the children a cache of their own (a temporary
``PYTHONPYCACHEPREFIX``, filled by a first run), as an installed drover has.

    .venv/bin/python bench/admin_scale.py            # --sessions 10000 --runs 5
    .venv/bin/python bench/admin_scale.py --before /tmp/before/src --runs 7 [--bytecode]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import (
    REPO,
    add_version_options,
    forbid_network,
    median,
    print_environment,
    src_env,
    table,
    versions,
    words,
)

from drover.core.events import event_to_dict
from drover.core.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock, user_message
from drover.journal.writes import (
    AppendEvent,
    AppendMessage,
    AppendPartialText,
    EndTurn,
    JournalWrite,
    UpsertToolCall,
)
from drover.store import SqliteStore

COPIED = ("sessions", "turns", "messages", "tool_calls", "events", "partial_text")


async def record_one(path: Path) -> str:
    async with SqliteStore(path) as store:
        session = await store.create_session(workdir="/tmp/w", model="openai:bench")
        turn = await store.begin_turn(session.id, user_message("look things up"), "b:1:1", 30.0)
        for step in range(1, 4):
            call = f"call_{step}"
            text = words(300, seed=step)
            for i in range(0, len(text), 100):
                await write(store, AppendPartialText(turn.id, step, 0, text[i : i + 100]))
            use = ToolUseBlock(id=call, name="lookup", input={"n": step})
            message = Message(role="assistant", content=(TextBlock(text=text), use))
            await write(store, AppendMessage(turn.id, message, step=step))
            await write(store, AppendEvent(session.id, turn.id, event_to_dict_message(message)))
            for state in ("input-available", "running", "output-available"):
                upsert = UpsertToolCall(
                    turn_id=turn.id,
                    call_id=call,
                    call_index=0,
                    name="lookup",
                    state=state,
                    input={"n": step},
                    output="x" * 500 if state == "output-available" else None,
                    step=step,
                )
                await write(store, upsert)
                event = {"type": "tool_state", "call_id": call, "name": "lookup", "state": state}
                await write(store, AppendEvent(session.id, turn.id, event))
            result = Message(role="user", content=(ToolResultBlock(tool_use_id=call, content="x"),))
            await write(store, AppendMessage(turn.id, result))
        answer = Message(role="assistant", content=(TextBlock(text=words(500)),))
        await write(store, AppendMessage(turn.id, answer, step=4))
        done = {"type": "done", "text": words(500)}
        await write(store, EndTurn(turn_id=turn.id, status="completed", event=done))
        return session.id


async def write(store: SqliteStore, value: JournalWrite) -> None:
    """One write (a batch of one: the store's only write entry point)."""
    await store.write_batch([value])


def event_to_dict_message(message: Message) -> dict[str, object]:
    from drover.core.events import AssistantMessage

    return event_to_dict(AssistantMessage(message=message))


def copy_sessions(path: Path, source: str, count: int) -> tuple[str, str]:
    """``count - 1`` copies of ``source`` under new ids (``s00001``…), older and older; the
    ids of the newest and the oldest session."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN")
    cols = {t: [r[1] for r in conn.execute(f"PRAGMA table_info({t})")] for t in COPIED}
    conn.execute(
        "CREATE TEMP TABLE n AS WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c "
        f"WHERE i < {count - 1}) SELECT i, printf('s%05d', i) AS sid, printf('t%05d', i) AS tid "
        "FROM c"
    )
    (turn,) = conn.execute("SELECT id FROM turns WHERE session_id = ?", (source,)).fetchone()
    for name in COPIED:
        columns = cols[name]
        out = []
        for c in columns:
            if (name == "sessions" and c == "id") or c == "session_id":
                out.append("n.sid")
            elif (name == "turns" and c == "id") or c == "turn_id":
                out.append("n.tid")
            elif c in ("created_at", "updated_at", "ended_at"):
                out.append(f"x.{c} - n.i * 3600")
            else:
                out.append(f"x.{c}")
        if name == "sessions":
            where = "x.id = :s"
        elif name == "turns" or "session_id" in columns:
            where = "x.session_id = :s"
        else:
            where = "x.turn_id = :t"
        conn.execute(
            f"INSERT INTO {name} ({', '.join(columns)}) SELECT {', '.join(out)} "
            f"FROM {name} x, n WHERE {where}",
            {"s": source, "t": turn},
        )
    conn.execute("COMMIT")
    conn.execute("ANALYZE")
    conn.close()
    return source, f"s{count - 1:05d}"


def cli(db: Path, argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """One ``drover`` process: its wall time and its CPU time (user + system), seconds."""
    start = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, "-m", "drover.cli.main", *argv, "--db", str(db)],
        stdout=subprocess.DEVNULL,
        cwd=REPO,
        env=env,
    )
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise subprocess.CalledProcessError(child.returncode, child.args)
    return wall, usage.ru_utime + usage.ru_stime


def child_env(src: Path | None, bytecode: Path | None) -> dict[str, str]:
    env = src_env(src)
    if bytecode is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(bytecode)
    return env


async def in_process(db: Path, newest: str, oldest: str, runs: int) -> list[float]:
    from drover.cli.admin import session_report

    out = []
    async with SqliteStore(db) as store:
        for what in ("sessions", newest, oldest):
            times = []
            for _ in range(runs):
                start = time.perf_counter()
                if what == "sessions":
                    for record in await store.list_sessions(limit=50):
                        await store.turns(record.id)
                else:
                    await session_report(store, what)
                times.append(time.perf_counter() - start)
            out.append(median(times))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--bytecode", action="store_true", help="children use a bytecode cache (as installed)"
    )
    add_version_options(parser, "timed as processes beside this checkout's")
    args = parser.parse_args()
    forbid_network()
    measured = versions(args)
    with tempfile.TemporaryDirectory(prefix="drover-bench-") as tmp:
        print_environment("bench/admin_scale.py — sessions and show on a large journal", Path(tmp))
        db = Path(tmp) / "many.db"
        source = asyncio.run(record_one(db))
        newest, oldest = copy_sessions(db, source, args.sessions)
        size = db.stat().st_size
        inproc = asyncio.run(in_process(db, newest, oldest, args.runs))
        cache = Path(tmp) / "pycache" if args.bytecode else None
        envs = {label: child_env(src, cache) for label, src in measured}
        rows = []
        for (name, argv), query in zip(
            [
                ("drover sessions", ["sessions"]),
                ("drover show NEWEST", ["show", newest]),
                ("drover show OLDEST", ["show", oldest]),
            ],
            inproc,
            strict=True,
        ):
            times: dict[str, list[tuple[float, float]]] = {label: [] for label in envs}
            for env in envs.values():
                cli(db, argv, env)  # the page cache (and, with --bytecode, the .pyc files)
            for i in range(args.runs):
                for label, env in list(envs.items())[:: 1 if i % 2 == 0 else -1]:
                    times[label].append(cli(db, argv, env))
            for label, _ in measured:
                walls, cpus = zip(*times[label], strict=True)
                row = [name, label, f"{median(walls) * 1e3:.0f} ms", f"{median(cpus) * 1e3:.0f} ms"]
                rows.append([*row, f"{query * 1e3:.1f} ms"])
    print(f"journal: {args.sessions} sessions, {size / 1e6:.1f} MB")
    print()
    headers = ["command", "src", "process (wall)", "process (CPU)", "queries in-process"]
    print(table(headers, rows))
    print()
    print("process: a new `python -m drover.cli.main …` each time, start-up included; median")
    print(f"bytecode cache: {'yes (--bytecode)' if args.bytecode else 'as the environment says'}")
    print("queries: the store calls the command makes, in one process (this checkout), median")


if __name__ == "__main__":
    main()
