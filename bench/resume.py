"""How long a long session takes to resume (issue #12): load, repair, build the next request.

A session of ``--steps`` tool steps (default 1,000: 2,000 messages, each step ~200 characters of
text and one tool call whose output is ~2 KiB) is written into a real SQLite file, spread over
``--turns`` turns (default 20) the way a user's long session grows, with every tool call's row.
The last turn is left ``running`` by a dead owner and recovered, so what is resumed carries
pending work too. Then, timed, as the next turn would do it:

* **load** — :func:`drover.runtime.runner.load_history` (turns, their messages, the session's tool
  calls) from a freshly opened store;
* **repair** — included in ``load`` (``build_history`` repairs as it builds); shown separately
  by re-running :func:`drover.journal.history.repair_history` over the loaded messages;
* **request** — the next request for each provider: drover's converter alone
  (``to_chat_messages``, ``plan_input``, ``to_anthropic_messages``), then the whole request
  as :mod:`request_build` times it — the provider's ``stream()`` until the HTTP request,
  body encoded, reaches an in-process transport (whatever the official SDK does on the way
  included) — and load + that request.

Medians of ``--runs`` (default 7) runs, wall time and (beside it) the process's CPU time, all
threads (steadier on a busy machine), each run after a ``gc.collect()``: a full pass of the
collector owed to earlier runs' garbage would otherwise land in some runs and not others.
Target: load + repair + the whole next request ≤ 50 ms.

    .venv/bin/python bench/resume.py            # --steps 1000 --turns 20 --runs 7
    .venv/bin/python bench/resume.py --page-size 4096   # a file of other pages than the store's
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import gc
import sqlite3
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import forbid_network, median, print_environment, table, words

from drover.core.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock, user_message
from drover.journal.history import repair_history
from drover.journal.writes import AppendMessage, EndTurn, UpsertToolCall
from drover.runtime.runner import load_history
from drover.store import SqliteStore


async def build(path: Path, steps: int, turns: int) -> str:
    per_turn = max(1, steps // turns)
    async with SqliteStore(path) as store:
        session = await store.create_session(workdir="/tmp", model="openai:bench")
        step = 0
        for t in range(turns):
            turn = await store.begin_turn(session.id, user_message(f"task {t}"), "bench:1:1", 30.0)
            for s in range(1, per_turn + 1):
                call_id = f"call_{step}"
                text = words(200, seed=step)
                use = ToolUseBlock(id=call_id, name="lookup", input={"n": step})
                asked = Message(role="assistant", content=(TextBlock(text=text), use))
                output = words(2048, seed=step + 1)
                ended = UpsertToolCall(
                    turn_id=turn.id,
                    call_id=call_id,
                    call_index=0,
                    name="lookup",
                    state="output-available",
                    input={"n": step},
                    output=output,
                    read_only=True,
                    step=s,
                )
                result = ToolResultBlock(tool_use_id=call_id, content=output)
                # One write at a time, as the store's only write entry point takes them.
                await store.write_batch([AppendMessage(turn.id, asked, step=s)])
                await store.write_batch([ended])
                results = Message(role="user", content=(result,))
                await store.write_batch([AppendMessage(turn.id, results)])
                step += 1
            if t < turns - 1:
                done = Message(role="assistant", content=(TextBlock(text="done"),))
                await store.write_batch([AppendMessage(turn.id, done)])
                await store.write_batch([EndTurn(turn_id=turn.id, status="completed")])
        # The last turn's owner is gone: recovery makes its work pending.
        await store.recover_orphans(lambda owner: False)
        return session.id


def timed(fn: Callable[[], Any], runs: int) -> tuple[str, Any]:
    """Median wall and CPU time of ``runs`` calls, as a cell; the last result."""
    walls, cpus, result = [], [], None
    for _ in range(runs):
        gc.collect()  # every run starts from the same collector state (see main)
        wall, cpu = time.perf_counter(), time.process_time()
        result = fn()
        cpus.append(time.process_time() - cpu)
        walls.append(time.perf_counter() - wall)
    return cell(median(walls), median(cpus)), result


def cell(wall: float, cpu: float) -> str:
    return f"{wall * 1e3:.1f} ms ({cpu * 1e3:.1f} CPU)"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument(
        "--page-size", type=int, default=None, help="SQLite page size of the file (the store's)"
    )
    args = parser.parse_args()
    forbid_network()
    with tempfile.TemporaryDirectory(prefix="drover-bench-") as tmp:
        print_environment("bench/resume.py — resume of a long session", Path(tmp))
        path = Path(tmp) / "resume.db"
        if args.page_size is not None:  # an empty file takes the page size it is vacuumed with
            conn = sqlite3.connect(path)
            conn.execute(f"PRAGMA page_size = {int(args.page_size)}")
            conn.execute("VACUUM")
            conn.close()
        session_id = await build(path, args.steps, args.turns)
        with contextlib.closing(sqlite3.connect(path)) as conn:
            page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        walls, cpus = [], []
        history = None
        for _ in range(args.runs):
            async with SqliteStore(path) as store:
                # A pass of the collector owed to the garbage of earlier runs (their whole
                # history) is not this run's: it would land in one run and not the next.
                gc.collect()
                wall, cpu = time.perf_counter(), time.process_time()
                history = await load_history(store, session_id)
                cpus.append(time.process_time() - cpu)
                walls.append(time.perf_counter() - wall)
        assert history is not None
        messages = history.committed + history.pending
        repair, _ = timed(lambda: repair_history(messages), args.runs)
        load = cell(median(walls), median(cpus))
        rows = [
            ["load_history (load + repair)", load, "", ""],
            ["  of which repair", repair, "", ""],
        ]
        rows += await request_rows(messages, args.runs, (median(walls), median(cpus)))
    print(f"session: {len(messages)} messages ({args.steps} tool steps, {args.turns} turns)")
    print(f"page size: {page_size} B")
    print()
    print(table(["step", "drover", "whole request", "load + request"], rows))
    print()
    print("wall (CPU). drover: drover's own step; whole request: from the provider's stream()")
    print("call until the HTTP request (headers, whole JSON body) reaches an in-process transport.")


async def request_rows(
    messages: list[Message], runs: int, load: tuple[float, float]
) -> list[list[str]]:
    """Per provider: drover's conversion alone, then the whole next request (conversion, the
    SDK's own work, JSON encoding) up to the transport, and load + that request."""
    from request_build import PROTOCOLS, TOOL, Probe, converter, provider_for, time_request

    from drover.core.model_stream import ModelRequest

    rows = []
    request = ModelRequest(system="system", messages=messages, tools=(TOOL,))
    for protocol in PROTOCOLS:
        took, _ = timed(functools.partial(converter(protocol), messages), runs)
        probe = Probe(protocol)
        provider = provider_for(protocol, probe)
        await time_request(provider, probe, request)  # warm-up
        timings = []
        for _ in range(runs):
            gc.collect()
            timings.append(await time_request(provider, probe, request))
        await provider.aclose()
        wall = median([w for w, _c in timings])
        cpu = median([c for _w, c in timings])
        total = cell(load[0] + wall, load[1] + cpu)
        rows.append([f"request: {protocol}", took, cell(wall, cpu), total])
    return rows


if __name__ == "__main__":
    asyncio.run(main())
