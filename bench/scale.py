"""Several ``drover serve`` processes on one PostgreSQL and one Redis: what scale-out costs.

Processes: the timed fake LLM (``fakeserver.py``), a throwaway PostgreSQL cluster and Redis
server (the tests' own, ``tests/support``), 1, 2 or 3 ``drover serve`` processes (this file
run with ``--child-serve``: the real server whose provider stamps each text delta with the
monotonic clock, as in ``server_load.py``), and the clients (this process). Each turn is posted
to process ``i`` and followed on process ``i + 1`` (mod P): with P > 1 every delta crosses
Redis before it reaches its client.

Figures, per number of processes P:
  * concurrent streaming turns completed, wall time, and turns per second sustained;
  * p50/p99 delay per delta, from the provider adapter of one process to an SSE client of
    another (CLOCK_MONOTONIC is shared by the processes of one machine);
  * PostgreSQL commits per turn step (``pg_stat_database.xact_commit`` of the journal's
    database before and after a run of serial tool-using turns: 2 steps each, one tool call);
  * Redis memory per live stream (``used_memory`` after the concurrent turns minus before,
    divided by the turns; each session's stream holds its turn's events);
  * takeover (P = 2, default 15 s lease): time from SIGKILL of the process running a turn to
    its client, on the other process, receiving the continuation turn's first event.

Usage: ``.venv/bin/python bench/scale.py [--processes 1,2,3] [--turns 60]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from common import (
    add_version_options,
    forbid_network,
    human_bytes,
    print_environment,
    table,
    versions,
    words,
)
from fakeserver import FakeServerProcess

CHUNK = 8  # characters per delta
DELAY = 0.02  # seconds between deltas: 50 deltas/s
TEXT = 800  # characters per answer: 100 deltas, 2 s
SERIAL_TURNS = 10


def child_serve(argv: list[str]) -> int:
    from server_load import child_serve as stamped_serve

    return stamped_serve(argv)


class Server:
    def __init__(
        self, fake_url: str, db: str, redis: str, workdir: Path, src: Path | None = None
    ) -> None:
        """``src``: a ``src`` directory to import drover from instead of this checkout's."""
        env = {**os.environ, "ANTHROPIC_API_KEY": "bench", "DROVER_CONFIG": "/nonexistent"}
        if src is not None:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(src), env.get("PYTHONPATH")]))
        argv = [sys.executable, __file__, "--child-serve", "--port", "0", "--model"]
        argv += ["anthropic:fake-model", "--base-url", fake_url, "--db", db, "--redis", redis]
        argv += ["--workdir", str(workdir), "--permission-mode", "allow", "--sandbox", "off"]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if "listening on" not in line:
            raise RuntimeError(f"drover serve did not start: {line!r}")
        self.url = line.rsplit(" ", 1)[1].strip()

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        self.proc.wait(60)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


async def _follow(
    client: Any, url: str, ready: asyncio.Event, delays: list[float], turns: int = 1
) -> list[str]:
    """Follow a session until ``turns`` terminal events; the event types seen."""
    seen: list[str] = []
    async with client.stream("GET", url) as response:
        event = ""
        async for line in response.aiter_lines():
            if line.startswith("event: "):
                event = line[7:]
                if event == "status":
                    ready.set()
            elif line.startswith("data: ") and event != "status":
                seen.append(event)
                if event == "text_delta":
                    stamp = float(json.loads(line[6:])["text"])
                    delays.append(time.monotonic() - stamp)
                elif event in ("done", "incomplete", "error"):
                    turns -= 1
                    if turns == 0:
                        return seen
    return seen


async def concurrent_run(servers: list[Server], turns: int) -> dict[str, Any]:
    import httpx2

    limits = httpx2.Limits(max_connections=turns * 3 + 10, max_keepalive_connections=turns * 3)
    clients = [httpx2.AsyncClient(base_url=s.url, timeout=300, limits=limits) for s in servers]
    try:
        n = len(servers)
        sessions = [
            (await clients[i % n].post("/v1/sessions", json={})).json()["id"] for i in range(turns)
        ]
        readies = [asyncio.Event() for _ in sessions]
        delays: list[list[float]] = [[] for _ in sessions]
        follows = [
            asyncio.create_task(_follow(clients[(i + 1) % n], f"/v1/sessions/{sid}/events", r, d))
            for i, (sid, r, d) in enumerate(zip(sessions, readies, delays, strict=True))
        ]
        await asyncio.wait_for(asyncio.gather(*(r.wait() for r in readies)), 120)
        started = time.monotonic()
        replies = await asyncio.gather(
            *(
                clients[i % n].post(f"/v1/sessions/{sid}/messages", json={"content": "go"})
                for i, sid in enumerate(sessions)
            )
        )
        refused = [r.status_code for r in replies if r.status_code != 202]
        if refused:
            raise RuntimeError(f"posts refused: {refused[:5]}")
        ends = await asyncio.wait_for(asyncio.gather(*follows), 600)
        wall = time.monotonic() - started
    finally:
        for client in clients:
            await client.aclose()
    flat = sorted(d for per in delays for d in per)
    return {
        "completed": sum(1 for seen in ends if seen and seen[-1] == "done"),
        "deltas": len(flat),
        "p50": statistics.median(flat),
        "p99": flat[max(int(len(flat) * 0.99) - 1, 0)],
        "wall": wall,
    }


async def serial_run(servers: list[Server], turns: int) -> None:
    """``turns`` tool-using turns one after another on one session (posted round-robin)."""
    import httpx2

    async with httpx2.AsyncClient(timeout=120) as client:
        sid = (await client.post(f"{servers[0].url}/v1/sessions", json={})).json()["id"]
        for i in range(turns):
            server = servers[i % len(servers)]
            ready = asyncio.Event()
            url = f"{server.url}/v1/sessions/{sid}/events"
            after = (await client.get(f"{server.url}/v1/sessions/{sid}")).json()["last_event_id"]
            follow = asyncio.create_task(_follow(client, f"{url}?after={after}", ready, []))
            await ready.wait()
            reply = await client.post(
                f"{server.url}/v1/sessions/{sid}/messages", json={"content": "go"}
            )
            if reply.status_code != 202:
                raise RuntimeError(f"post refused: {reply.text}")
            await asyncio.wait_for(follow, 120)


async def takeover_run(servers: list[Server]) -> float:
    """Seconds from SIGKILL of the process running a turn to the continuation's first event
    on a client of the other process."""
    import httpx2

    victim, watcher = servers[1], servers[0]
    async with httpx2.AsyncClient(timeout=120) as client:
        sid = (await client.post(f"{watcher.url}/v1/sessions", json={})).json()["id"]
        first = (
            await client.post(f"{victim.url}/v1/sessions/{sid}/messages", json={"content": "go"})
        ).json()["turn_id"]
        killed = 0.0
        async with client.stream("GET", f"{watcher.url}/v1/sessions/{sid}/events") as response:
            event, deltas = "", 0
            async for line in response.aiter_lines():
                if line.startswith("event: "):
                    event = line[7:]
                    continue
                if not line.startswith("data: "):
                    continue
                data = json.loads(line[6:])
                if event == "text_delta" and not killed:
                    deltas += 1
                    if deltas == 20:
                        victim.proc.send_signal(signal.SIGKILL)
                        killed = time.monotonic()
                elif killed and (event == "reset" or data.get("turn_id") not in (None, first)):
                    return time.monotonic() - killed
    raise RuntimeError("the turn was never taken over")


def commits(url: str) -> int:
    """The database's commit count once PostgreSQL's statistics settled (they are published
    about once a second): two reads a second apart agree (bounded)."""
    import psycopg

    def read() -> int:
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
            ).fetchone()
        return int(row[0]) if row else 0

    last = read()
    for _ in range(10):
        time.sleep(1.1)
        now = read()
        if now - last <= 1:  # our own read's commit
            return now
        last = now
    return last


def main() -> int:
    if sys.argv[1:2] == ["--child-serve"]:
        return child_serve(sys.argv[2:])
    parser = argparse.ArgumentParser()
    parser.add_argument("--processes", default="1,2,3")
    parser.add_argument("--turns", type=int, default=60)
    add_version_options(
        parser,
        "each process count is measured for it and for this checkout (or --after) in the same "
        "run, alternating; takeover: after only",
    )
    options = parser.parse_args()
    measured = versions(options)
    forbid_network()
    from support import pg
    from support import redis as redis_support

    tmp = Path(tempfile.mkdtemp(prefix="drover-bench-scale-"))
    print_environment("drover serve: several processes on PostgreSQL + Redis", tmp)
    rows = []
    takeover = None
    with pg.cluster() as cluster, redis_support.server() as redis, FakeServerProcess() as fake:
        counts = [int(p) for p in options.processes.split(",")]
        runs = [
            (n, label, src)
            for i, n in enumerate(counts)
            for label, src in (measured if i % 2 == 0 else measured[::-1])
        ]
        for n, label, src in runs:
            db = cluster.new_database()
            redis.command("FLUSHALL")
            servers = [Server(fake.base_url, db, redis.url, tmp, src) for _ in range(n)]
            try:
                fake.load(
                    [{"text": words(TEXT)} for _ in range(options.turns)],
                    chunk_size=CHUNK,
                    delay=DELAY,
                )
                before = _used_memory(redis)
                r = asyncio.run(concurrent_run(servers, options.turns))
                memory = (_used_memory(redis) - before) / options.turns
                step = [
                    {"text": "ok", "tool_calls": [{"name": "glob", "input": {"pattern": "*"}}]},
                    {"text": "done"},
                ]
                fake.load(step * SERIAL_TURNS)
                start = commits(db)
                asyncio.run(serial_run(servers, SERIAL_TURNS))
                per_step = (commits(db) - start) / (SERIAL_TURNS * 2)
                if n == 2 and takeover is None and label != "before":
                    fake.load(
                        [{"text": words(4000)}, {"text": "resumed"}], chunk_size=CHUNK, delay=DELAY
                    )
                    takeover = asyncio.run(takeover_run(servers))
            finally:
                for server in servers:
                    if server.proc.poll() is None:
                        server.proc.send_signal(signal.SIGTERM)
                for server in servers:
                    server.stop()
            rows.append(
                [
                    label,
                    n,
                    f"{r['completed']}/{options.turns}",
                    f"{r['wall']:.1f}",
                    f"{r['completed'] / r['wall']:.1f}",
                    r["deltas"],
                    f"{r['p50'] * 1000:.1f}",
                    f"{r['p99'] * 1000:.1f}",
                    f"{per_step:.1f}",
                    human_bytes(int(memory)),
                ]
            )
    head = ["server", "procs", "turns done", "wall s", "turns/s", "deltas", "p50 ms", "p99 ms"]
    print(table([*head, "PG commits/step", "Redis/stream"], rows))
    if takeover is not None:
        print(f"\ntakeover after SIGKILL (2 processes, lease 15 s): {takeover:.2f} s")
    print(
        "\nturns: concurrent streaming turns, each posted to process i and followed on process "
        f"i+1; {TEXT} characters in {CHUNK}-character deltas, one every {DELAY * 1000:.0f} ms."
        "\np50/p99: delay from the provider adapter of the process running the turn to the "
        "client's parser on another process (through Redis when procs > 1)."
        f"\nPG commits/step: PostgreSQL commits per model call of {SERIAL_TURNS} serial "
        "tool-using turns (2 steps each), whole cluster database, all processes."
        "\nRedis/stream: Redis used_memory growth per session stream after the concurrent turns."
    )
    return 0


def _used_memory(redis: Any) -> int:
    info = redis.command("INFO", "memory").decode(errors="replace")
    for line in info.splitlines():
        if line.startswith("used_memory:"):
            return int(line.split(":", 1)[1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
