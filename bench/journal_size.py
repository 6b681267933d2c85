"""What the journal stores for a long tool loop, against the history it holds (issue #31, 1).

One turn of ``--steps`` (default 300) tool steps — each ~200 characters of streamed text and one
call of a read-only tool whose output is ``--output`` (default 2,048) characters of text — then
a ~400-character answer, through the real loop, provider (official SDK, streaming), Runner and
SqliteStore, against the fake LLM in its own process. Then:

* **history JSON** — the session's history as the next turn loads it (``runner.load_history``),
  each message in its stored form (``message_to_dict``), encoded as compact JSON
  (``separators=(",", ":")``, UTF-8): the bytes the journal has to keep at the least;
* **db** — the database file after ``PRAGMA wal_checkpoint(TRUNCATE)`` (the ``-wal`` is then
  empty), and **in use** — its pages in use (``page_count − freelist_count``), both × page size;
* **db ÷ history** — the figure of the issue; then the bytes each table and index holds
  (SQLite's ``dbstat``: payload and whole pages) and, for the ``events`` table, the bytes of
  each event type's payloads.

``--before SRC`` (a ``src/`` directory or a checkout holding one) measures another version
beside this checkout's, each in a child process of its own, in the same run.

    .venv/bin/python bench/journal_size.py                       # --steps 300 --output 2048
    .venv/bin/python bench/journal_size.py --before /work/before
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from common import (
    add_version_options,
    checkpointed_size,
    drover_provider,
    forbid_network,
    human_bytes,
    print_environment,
    run_drover,
    src_env,
    table,
    versions,
    words,
)

from drover.tools import ToolContext, ToolRegistry, tool

_RESULT = "result "


def script(steps: int) -> list[dict[str, Any]]:
    responses: list[dict[str, Any]] = [
        {"text": words(200, seed=i), "tool_calls": [{"name": "fetch_page", "input": {"n": i}}]}
        for i in range(steps)
    ]
    responses.append({"text": words(400, seed=steps)})
    return responses


#: Characters per tool output (the child sets it from ``--output``).
OUTPUT_CHARS = [2048]


@tool(read_only=True)
async def fetch_page(ctx: ToolContext, n: int) -> str:
    """Fetch one page of a document.

    Args:
        n: The page number.
    """
    return words(OUTPUT_CHARS[0], seed=1000 + n)


def _history_json(db: Path) -> bytes:
    from drover.core.messages import message_to_dict
    from drover.runtime.runner import load_history
    from drover.store import SqliteStore

    async def load() -> bytes:
        store = SqliteStore(db)
        await store.open()
        try:
            (session,) = await store.list_sessions()
            history = await load_history(store, session.id)
        finally:
            await store.close()
        messages = [message_to_dict(m) for m in [*history.committed, *history.pending]]
        return json.dumps(messages, ensure_ascii=False, separators=(",", ":")).encode()

    return asyncio.run(load())


def _sizes(db: Path) -> dict[str, Any]:
    """In-use bytes, per-table dbstat bytes and events' payload bytes by type."""
    conn = sqlite3.connect(db)
    try:
        page = conn.execute("PRAGMA page_size").fetchone()[0]
        count = conn.execute("PRAGMA page_count").fetchone()[0]
        free = conn.execute("PRAGMA freelist_count").fetchone()[0]
        try:
            stat = conn.execute(
                "SELECT name, SUM(payload), SUM(pgsize) FROM dbstat GROUP BY name "
                "ORDER BY SUM(pgsize) DESC"
            ).fetchall()
        except sqlite3.OperationalError:  # built without SQLITE_ENABLE_DBSTAT_VTAB
            stat = []
        by_type = conn.execute(
            "SELECT type, COUNT(*), SUM(LENGTH(CAST(payload AS BLOB))) FROM events "
            "GROUP BY type ORDER BY 3 DESC"
        ).fetchall()
    finally:
        conn.close()
    return {
        "in_use": (count - free) * page,
        "page_size": page,
        "tables": [list(r) for r in stat],
        "events": [list(r) for r in by_type],
    }


async def _run(steps: int, output: int, protocol: str, workdir: Path) -> Path:
    from fakeserver import FakeServerProcess

    db = workdir / "size.db"
    with FakeServerProcess() as fake:
        fake.load(script(steps), chunk_size=8)
        url = fake.base_url if protocol == "anthropic" else fake.openai_base_url
        provider = drover_provider(protocol, url)
        try:
            run = await run_drover(
                provider=provider,
                tools=ToolRegistry([fetch_page]),
                workdir=workdir,
                prompt="read every page",
                max_turns=steps + 5,
                db=db,
            )
        finally:
            await provider.aclose()
        if run.status != "done":
            raise SystemExit(f"the run ended {run.status}, not done")
        fake.check_clean()
    return db


def child(steps: int, output: int, protocol: str) -> None:
    """One run in this process; prints its figures as one JSON line."""
    forbid_network()
    OUTPUT_CHARS[0] = output
    with tempfile.TemporaryDirectory(prefix="drover-bench-") as tmp:
        db = asyncio.run(_run(steps, output, protocol, Path(tmp)))
        history = _history_json(db)
        size = checkpointed_size(db)
        figures = {"history": len(history), "db": size, **_sizes(db)}
    print(_RESULT + json.dumps(figures), flush=True)


def measure(src: Path | None, args: argparse.Namespace) -> dict[str, Any]:
    argv = [sys.executable, __file__, "--child", "--steps", str(args.steps)]
    argv += ["--output", str(args.output), "--protocol", args.protocol]
    done = subprocess.run(
        argv, capture_output=True, text=True, env=src_env(src), check=False, timeout=900
    )
    for line in done.stdout.splitlines():
        if line.startswith(_RESULT):
            return dict(json.loads(line[len(_RESULT) :]))
    tail = "\n".join(done.stderr.splitlines()[-15:])
    raise SystemExit(f"a run failed ({src or 'this checkout'}):\n{tail}")


def _src(path: Path | None) -> Path | None:
    """A ``src/`` directory, given it or the checkout that holds it."""
    if path is not None and (path / "src" / "drover").is_dir():
        return path / "src"
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--output", type=int, default=2048, help="characters per tool output")
    parser.add_argument("--protocol", choices=["anthropic", "openai"], default="anthropic")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    add_version_options(parser, "measured beside this checkout")
    args = parser.parse_args()
    if args.child:
        child(args.steps, args.output, args.protocol)
        return
    args.before, args.after = _src(args.before), _src(args.after)
    print_environment("bench/journal_size.py — database bytes ÷ history JSON")
    print(
        f"workload: {args.steps} steps × (~200 chars of text + 1 call of a tool whose output "
        f"is {args.output} chars), then a ~400-char answer; {args.protocol} protocol"
    )
    results = [(label, measure(src, args)) for label, src in versions(args)]
    rows = []
    for label, r in results:
        rows.append(
            [
                label,
                human_bytes(r["history"]),
                human_bytes(r["db"]),
                human_bytes(r["in_use"]),
                f"{r['db'] / r['history']:.2f}",
                f"{r['in_use'] / r['history']:.2f}",
            ]
        )
    print(table(["version", "history JSON", "db", "in use", "db÷history", "in use÷history"], rows))
    for label, r in results:
        print(f"\nwhere the bytes are ({label}; dbstat payload / pages, ÷ history JSON):")
        print(
            table(
                ["table or index", "payload", "pages", "pages÷history"],
                [
                    [name, human_bytes(p), human_bytes(s), f"{s / r['history']:.2f}"]
                    for name, p, s in r["tables"]
                ],
            )
        )
        print(f"\nevents by type ({label}): rows, payload bytes")
        print(
            table(
                ["type", "rows", "payload"],
                [[kind, n, human_bytes(b)] for kind, n, b in r["events"]],
            )
        )


if __name__ == "__main__":
    main()
