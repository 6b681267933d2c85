"""drover's journal next to its peers' persistence, on one workload (issue #5, figure 3).

Run it with ``bash bench/run_peers.sh``: that script keeps the peers (LangGraph, LangChain's
OpenAI chat model, the OpenAI Agents SDK) in their own venv, ``bench/.venv-peers``.

The workload, through drover's fake LLM speaking Chat Completions (streaming, 8-char chunks;
the fake runs in its own process on 127.0.0.1): 50 steps, each ~200 characters of text and one
call of a tool ``lookup`` whose output is 2 KiB, then a final 2 KiB answer — 51 model calls.
It is run by

* **drover** — :class:`drover.runtime.runner.Runner` + :class:`drover.store.SqliteStore`
(persistence
  off: a plain :class:`drover.turn.state.AgentSession`), Chat Completions provider;
* **langgraph** — ``create_react_agent`` with ``ChatOpenAI(streaming=True)`` and an
  ``AsyncSqliteSaver`` checkpointer (off: no checkpointer), consumed with
  ``astream(stream_mode="messages")``;
* **openai-agents** — ``Agent`` + ``Runner.run_streamed`` with an
  ``OpenAIChatCompletionsModel`` and a ``SQLiteSession`` (off: no session).

Figures, per framework: the framework's own time per model call (wall − the fake's time, ÷ 51;
the fake times each request from its arrival to its last byte), persistence overhead (on ÷ off,
medians over interleaved runs), database bytes and commits for one run, and what survives a
SIGKILL while the final answer streams (each framework in a subprocess; its database is opened
afterwards: tool outputs kept, partial answer kept).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common import (
    CommitCounter,
    checkpointed_size,
    db_files_size,
    drover_provider,
    forbid_network,
    human_bytes,
    median,
    print_environment,
    quiet_environment,
    run_drover,
    table,
    words,
)
from fakeserver import FakeServerProcess, wait_until

from drover.tools import ToolContext, ToolRegistry, tool

STEPS = 50
CALLS = STEPS + 1
THREAD = "bench-thread"
PROMPT = "Look up the records one by one, then write the report."
KILL_AFTER = 1.0  # seconds into the final answer's stream
FINAL_FRAME_DELAY = 0.02  # the final answer streams at 8 chars / 20 ms = 400 chars/s
FRAMEWORKS = ("drover", "langgraph", "openai-agents")


def record(i: int) -> str:
    """The tool's output for step ``i``: 2 KiB of text."""
    return words(2048, seed=1000 + i)


FINAL_ANSWER = words(2048, seed=999)


def script(final_delay: float | None = None) -> list[dict[str, Any]]:
    responses: list[dict[str, Any]] = [
        {"text": words(200, seed=i), "tool_calls": [{"name": "lookup", "input": {"i": i}}]}
        for i in range(STEPS)
    ]
    final: dict[str, Any] = {"text": FINAL_ANSWER}
    if final_delay is not None:
        final["delay"] = final_delay
    responses.append(final)
    return responses


# -- the frameworks ------------------------------------------------------------------------------


Runner = Callable[[str, Path | None], Coroutine[Any, Any, str]]


@tool(read_only=True, name="lookup")
async def drover_lookup(ctx: ToolContext, i: int) -> str:
    """Look up record number i.

    Args:
        i: The record number.
    """
    return record(i)


async def run_drover_once(base_url: str, db: Path | None) -> str:
    provider = drover_provider("openai", base_url)
    try:
        run = await run_drover(
            provider=provider,
            tools=ToolRegistry([drover_lookup]),
            workdir=Path(tempfile.gettempdir()),
            prompt=PROMPT,
            max_turns=CALLS + 5,
            db=db,
        )
    finally:
        await provider.aclose()
    if run.status != "done":
        raise RuntimeError(f"drover ended {run.status}")
    return run.text


async def run_langgraph_once(base_url: str, db: Path | None) -> str:
    from langchain_core.tools import tool as lc_tool
    from langchain_openai import ChatOpenAI
    from langgraph.prebuilt import create_react_agent
    from pydantic import SecretStr

    @lc_tool
    async def lookup(i: int) -> str:
        """Look up record number i."""
        return record(i)

    model = ChatOpenAI(
        model="fake-model",
        base_url=base_url,
        api_key=SecretStr("sk-fake"),
        streaming=True,
        max_retries=0,
    )
    config = {"configurable": {"thread_id": THREAD}, "recursion_limit": 4 * CALLS}
    inputs = {"messages": [("user", PROMPT)]}

    async def drive(agent: Any) -> str:
        # "messages" streams the tokens; "values" hands over the state after each step.
        last: Any = None
        async for mode, payload in agent.astream(
            inputs, config, stream_mode=["messages", "values"]
        ):
            if mode == "values":
                last = payload
        return str(last["messages"][-1].content) if last else ""

    if db is None:
        return await drive(create_react_agent(model, [lookup]))
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async with AsyncSqliteSaver.from_conn_string(str(db)) as saver:
        await saver.setup()  # creating the tables is set-up, as drover's migrations are
        return await drive(create_react_agent(model, [lookup], checkpointer=saver))


async def run_agents_once(base_url: str, db: Path | None) -> str:
    from agents import (
        Agent,
        OpenAIChatCompletionsModel,
        RunConfig,
        SQLiteSession,
        function_tool,
    )
    from agents import Runner as AgentsRunner
    from openai import AsyncOpenAI

    @function_tool
    async def lookup(i: int) -> str:
        """Look up record number i.

        Args:
            i: The record number.
        """
        return record(i)

    client = AsyncOpenAI(base_url=base_url, api_key="sk-fake", max_retries=0)
    agent = Agent(
        name="bench",
        instructions="You look up records.",
        model=OpenAIChatCompletionsModel(model="fake-model", openai_client=client),
        tools=[lookup],
    )
    session = SQLiteSession(THREAD, str(db)) if db is not None else None
    try:
        result = AgentsRunner.run_streamed(
            agent,
            PROMPT,
            max_turns=CALLS + 5,
            session=session,
            run_config=RunConfig(tracing_disabled=True),
        )
        async for _event in result.stream_events():
            pass
        return str(result.final_output)
    finally:
        if session is not None:
            session.close()
        await client.close()


RUNNERS: dict[str, Runner] = {
    "drover": run_drover_once,
    "langgraph": run_langgraph_once,
    "openai-agents": run_agents_once,
}


def availability() -> dict[str, str | None]:
    """None for a framework that imports, else why it cannot run here."""
    needs = {
        "drover": ["drover.providers.openai_chat"],
        "langgraph": ["langgraph.prebuilt", "langgraph.checkpoint.sqlite.aio", "langchain_openai"],
        "openai-agents": ["agents"],
    }
    out: dict[str, str | None] = {}
    for name, modules in needs.items():
        out[name] = None
        for module in modules:
            try:
                __import__(module)
            except Exception as exc:
                out[name] = f"cannot import {module}: {type(exc).__name__}: {exc}"
                break
    return out


# -- what survives a SIGKILL ---------------------------------------------------------------------


@dataclass(slots=True)
class Survival:
    tool_outputs: int | str
    partial_chars: int | str
    note: str = ""


def _sql(db: Path, query: str, *params: Any) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return [tuple(r) for r in conn.execute(query, params).fetchall()]
    finally:
        conn.close()


async def survived_drover(db: Path) -> Survival:
    """Recovered the way drover's next process would: orphan recovery, then the history."""
    from drover.core.messages import TextBlock, ToolResultBlock
    from drover.runtime.runner import Runner, load_history
    from drover.store import SqliteStore

    raw_outputs = _sql(db, "SELECT COUNT(*) FROM tool_calls WHERE state = 'output-available'")
    raw_text = _sql(db, "SELECT COALESCE(SUM(LENGTH(text)), 0) FROM partial_text")
    async with SqliteStore(db) as store:
        recovered = await Runner(store).recover()
        session = (await store.list_sessions(1))[0]
        history = await load_history(store, session.id)
    results = [b for m in history.pending for b in m.content if isinstance(b, ToolResultBlock)]
    kept = [b for b in results if not b.is_error]
    last = history.pending[-1] if history.pending else None
    partial = 0
    if last is not None and last.role == "assistant":
        partial = sum(len(b.text) for b in last.content if isinstance(b, TextBlock))
    note = (
        f"raw: {raw_outputs[0][0]} outputs, {raw_text[0][0]} chars of partial_text; "
        f"recover() closed {len(recovered)} turn(s), history holds the turn as pending"
    )
    return Survival(tool_outputs=len(kept), partial_chars=partial, note=note)


async def survived_langgraph(db: Path) -> Survival:
    from langchain_core.messages import AIMessage, ToolMessage
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async with AsyncSqliteSaver.from_conn_string(str(db)) as saver:
        found = await saver.aget_tuple({"configurable": {"thread_id": THREAD}})
    checkpoints = _sql(db, "SELECT COUNT(*) FROM checkpoints")[0][0]
    writes = _sql(db, "SELECT COUNT(*) FROM writes")[0][0]
    if found is None:
        return Survival(0, 0, f"no checkpoint ({checkpoints} rows, {writes} writes)")
    messages = found.checkpoint["channel_values"].get("messages", [])
    tools = [m for m in messages if isinstance(m, ToolMessage)]
    last = messages[-1] if messages else None
    partial = 0
    if isinstance(last, AIMessage) and not last.tool_calls:
        partial = len(str(last.content))
    note = f"latest checkpoint of {checkpoints}, {len(messages)} messages; {writes} pending writes"
    return Survival(len(tools), partial, note)


async def survived_agents(db: Path) -> Survival:
    from agents import SQLiteSession

    session = SQLiteSession(THREAD, str(db))
    try:
        items = await session.get_items()
    finally:
        session.close()
    outputs = [i for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]
    partial = 0
    if items:
        last = items[-1]
        if isinstance(last, dict) and last.get("role") == "assistant":
            content = last.get("content")
            if isinstance(content, list):
                partial = sum(len(str(c.get("text", ""))) for c in content if isinstance(c, dict))
            elif isinstance(content, str):
                partial = len(content)
    return Survival(len(outputs), partial, f"{len(items)} session items")


SURVIVAL: dict[str, Callable[[Path], Coroutine[Any, Any, Survival]]] = {
    "drover": survived_drover,
    "langgraph": survived_langgraph,
    "openai-agents": survived_agents,
}


@dataclass(slots=True)
class KillResult:
    framework: str
    streamed_chars: int = 0
    survival: Survival | None = None
    error: str = ""


def kill_test(framework: str, fake: FakeServerProcess, workdir: Path) -> KillResult:
    """Run the workload in a subprocess and SIGKILL it while the final answer streams."""
    db = workdir / f"kill-{framework}.db"
    fake.load(script(final_delay=FINAL_FRAME_DELAY), chunk_size=8)
    child = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).resolve()),
            "--child",
            framework,
            "--db",
            str(db),
            "--base-url",
            fake.openai_base_url,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    result = KillResult(framework)

    def final_streaming_long_enough() -> bool:
        if child.poll() is not None:
            return True
        requests = fake.stats()["requests"]
        return len(requests) >= CALLS and requests[-1]["seconds"] >= KILL_AFTER

    try:
        reached = wait_until(final_streaming_long_enough, timeout=90.0, interval=0.01)
        if child.poll() is not None:
            _, err = child.communicate(timeout=5)
            result.error = f"child ended by itself (exit {child.returncode}): {err.strip()[-300:]}"
            return result
        stats = fake.stats()
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        if not reached:
            result.error = f"the final answer never started ({len(stats['requests'])} requests)"
            return result
        result.streamed_chars = len(stats["last_text"])
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
        if child.stdout:
            child.stdout.close()
        if child.stderr:
            child.stderr.close()
    try:
        result.survival = asyncio.run(SURVIVAL[framework](db))
    except Exception as exc:
        result.error = f"could not read its database: {type(exc).__name__}: {exc}"
    return result


# -- timing --------------------------------------------------------------------------------------


@dataclass(slots=True)
class Sample:
    wall: float
    fake: float
    cpu: float
    requests: int


@dataclass(slots=True)
class Figures:
    framework: str
    error: str = ""
    on: list[Sample] = field(default_factory=list)
    off: list[Sample] = field(default_factory=list)
    commits: int = 0
    db_bytes: int = 0
    wal_bytes: int = 0
    stored_bytes: int = 0
    journal_mode: str = ""
    pragmas: list[str] = field(default_factory=list)
    kill: KillResult | None = None


async def timed(framework: str, fake: FakeServerProcess, db: Path | None) -> Sample:
    fake.load(script(), chunk_size=8)
    started, cpu_started = time.perf_counter(), time.process_time()
    text = await RUNNERS[framework](fake.openai_base_url, db)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    fake.check_clean()
    if text != FINAL_ANSWER:
        raise RuntimeError(f"{framework} answered {text[:60]!r}…, not the scripted answer")
    stats = fake.stats()
    requests = stats["requests"]
    fake_seconds = sum(r["seconds"] for r in requests)
    return Sample(wall=wall, fake=fake_seconds, cpu=cpu, requests=len(requests))


def journal_mode(db: Path) -> str:
    with open(db, "rb") as f:
        header = f.read(20)
    return "WAL" if len(header) >= 20 and header[18] == 2 else "rollback"


async def measure(
    frameworks: list[str], runs: int, fake: FakeServerProcess, workdir: Path, counter: CommitCounter
) -> dict[str, Figures]:
    figures = {name: Figures(name) for name in frameworks}
    # Warm-up: one run of each mode; the 'on' one is traced for commits and sized.
    for name in frameworks:
        fig = figures[name]
        db = workdir / f"{name}-warm.db"
        try:
            with counter.watching():
                await timed(name, fake, db)
            counts = counter.counts(db)
            fig.commits = counts.commits
            fig.db_bytes, fig.wal_bytes = db_files_size(db)
            fig.stored_bytes = checkpointed_size(db)
            fig.journal_mode = journal_mode(db)
            fig.pragmas = counter.pragmas(db)
            await timed(name, fake, None)
        except Exception as exc:
            fig.error = f"{type(exc).__name__}: {exc}"
            print(f"  {name}: failed — {fig.error}", flush=True)
            traceback.print_exc(limit=3)
    live = [n for n in frameworks if not figures[n].error]
    for i in range(runs):
        for name in live:
            modes = ("on", "off") if i % 2 == 0 else ("off", "on")
            for mode in modes:
                run_db = workdir / f"{name}-{i}.db" if mode == "on" else None
                sample = await timed(name, fake, run_db)
                getattr(figures[name], mode).append(sample)
                print(
                    f"  round {i + 1}: {name:13} {mode:3} wall {sample.wall:6.3f} s  "
                    f"fake {sample.fake:6.3f} s  cpu {sample.cpu:6.3f} s",
                    flush=True,
                )
    return figures


def report(figures: dict[str, Figures]) -> None:
    timing, storage = [], []
    for fig in figures.values():
        if fig.error or not fig.on:
            timing.append([fig.framework, *["—"] * 6, fig.error[:70]])
            storage.append([fig.framework, "—", "—", "—", "—"])
            continue

        def per_call(samples: list[Sample], what: Callable[[Sample], float]) -> float:
            return median([what(s) for s in samples]) / CALLS

        own_off = per_call(fig.off, lambda s: s.wall - s.fake)
        own_on = per_call(fig.on, lambda s: s.wall - s.fake)
        cpu_off = per_call(fig.off, lambda s: s.cpu)
        cpu_on = per_call(fig.on, lambda s: s.cpu)
        wall_ratio = per_call(fig.on, lambda s: s.wall) / per_call(fig.off, lambda s: s.wall)
        timing.append(
            [
                fig.framework,
                f"{1000 * own_off:.1f} ms",
                f"{1000 * own_on:.1f} ms",
                f"{1000 * cpu_off:.1f} ms",
                f"{1000 * cpu_on:.1f} ms",
                f"{wall_ratio:.3f}",
                f"{own_on / own_off:.3f}",
                f"{cpu_on / cpu_off:.3f}",
            ]
        )
        sync = next((p for p in fig.pragmas if "SYNCHRONOUS" in p.upper()), "default (FULL)")
        storage.append(
            [
                fig.framework,
                human_bytes(fig.stored_bytes),
                f"{human_bytes(fig.db_bytes)}, WAL {human_bytes(fig.wal_bytes)}",
                f"{fig.commits} ({fig.commits / CALLS:.1f}/call)",
                f"{fig.journal_mode}, {sync.replace('PRAGMA ', '')}",
            ]
        )
    print("Time per model call (51 calls), medians of the timed runs:")
    headers = ["framework", "own off", "own on", "CPU off", "CPU on", "on÷off wall"]
    print(table([*headers, "on÷off own", "on÷off CPU"], timing))
    print()
    print("Storage of one run with persistence on:")
    print(
        table(
            ["framework", "db (checkpointed)", "files when closed", "commits", "sqlite mode"],
            storage,
        )
    )
    print()
    rows = []
    for fig in figures.values():
        kill = fig.kill
        if kill is None:
            rows.append([fig.framework, "—", "—", "—", fig.error[:70] or "not run"])
        elif kill.survival is None:
            rows.append([fig.framework, "—", "—", "—", kill.error[:90]])
        else:
            s = kill.survival
            rows.append(
                [
                    fig.framework,
                    f"{s.tool_outputs} of {STEPS}",
                    f"{s.partial_chars} chars" if s.partial_chars else "no",
                    f"{kill.streamed_chars} chars",
                    s.note,
                ]
            )
    print("SIGKILL while the final answer streams (killed ≥ 1 s into it; 2,048 chars in all):")
    print(
        table(["framework", "tool outputs kept", "partial answer kept", "streamed", "detail"], rows)
    )


# -- entry points --------------------------------------------------------------------------------


def child_main(framework: str, db: Path, base_url: str) -> None:
    forbid_network()
    quiet_environment()
    warnings.filterwarnings("ignore")
    asyncio.run(RUNNERS[framework](base_url, db))
    print("finished", flush=True)


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=3, help="timed runs per mode and framework")
    parser.add_argument("--only", nargs="*", choices=FRAMEWORKS, default=list(FRAMEWORKS))
    parser.add_argument("--no-kill", action="store_true", help="skip the SIGKILL test")
    parser.add_argument("--dir", type=Path, default=None, help="where the databases go")
    parser.add_argument("--child", choices=FRAMEWORKS, help=argparse.SUPPRESS)
    parser.add_argument("--db", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--base-url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child_main(args.child, args.db, args.base_url)
    else:
        asyncio.run(main(args))


async def main(args: argparse.Namespace) -> None:
    forbid_network()
    quiet_environment()
    warnings.filterwarnings("ignore")
    counter = CommitCounter()
    counter.install()
    with (
        tempfile.TemporaryDirectory(prefix="drover-bench-", dir=args.dir) as tmp,
        FakeServerProcess() as fake,
    ):
        workdir = Path(tmp)
        print_environment("bench/peers.py — drover's journal and its peers' persistence", workdir)
        print(_versions())
        print(
            f"workload: {STEPS} steps × (~200 chars of text + 1 tool call with a 2 KiB output), "
            f"then a 2 KiB answer = {CALLS} model calls; Chat Completions, streaming, 8-char "
            "chunks; fake server in its own process"
        )
        print()
        reasons = availability()
        frameworks = []
        for name in args.only:
            if reasons[name] is None:
                frameworks.append(name)
            else:
                print(f"  {name}: skipped — {reasons[name]}")
        figures = await measure(frameworks, args.runs, fake, workdir, counter)
        for name in args.only:
            figures.setdefault(name, Figures(name, error=reasons[name] or "not run"))
        if not args.no_kill:
            for name in frameworks:
                kill = await asyncio.to_thread(kill_test, name, fake, workdir)
                figures[name].kill = kill
                print(f"  killed {name}: {kill.error or 'ok'}", flush=True)
    print()
    report(figures)
    print()
    print(LEGEND)


def _versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    parts = []
    for package in (
        "openai",
        "langgraph",
        "langgraph-checkpoint-sqlite",
        "langchain-openai",
        "openai-agents",
    ):
        try:
            parts.append(f"{package} {version(package)}")
        except PackageNotFoundError:
            parts.append(f"{package} (not installed)")
    return "peers    " + ", ".join(parts)


LEGEND = """\
own off, on    the framework's own time: (wall − the fake's own time) ÷ 51 model calls, with
               persistence off and on; the fake's time is measured inside the fake per request
               (request received → last byte sent)
CPU off, on    CPU time of the benchmark process (all its threads) ÷ 51; less sensitive than
               wall time to the load of other processes
on÷off         persistence overhead: median with persistence ÷ median without, for wall time,
               own time and CPU time (same framework, same run, modes alternated ABBA)
db             the database after wal_checkpoint(TRUNCATE), for one run (the warm-up)
files when     the .db and -wal files as the framework left them once it closed its
closed         connections (SQLite folds the WAL in when the last connection closes)
commits        SQLite commits of that run, traced with sqlite3 set_trace_callback on every
               connection (COMMIT/END, plus write statements run in autocommit mode)
sqlite mode    journal mode (file header) and the synchronous setting the framework chose
               (a traced PRAGMA), else SQLite's default FULL: an fsync per commit in WAL
kill test      each framework runs the workload in a subprocess; when the fake has streamed
               the final answer for ≥ 1 s, the child gets SIGKILL; its database is then read
               as its next process would read it"""


if __name__ == "__main__":
    cli()
