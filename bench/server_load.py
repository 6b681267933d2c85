"""``drover serve`` under load: concurrent streaming turns, delta latency, memory, replay.

Three processes: the timed fake LLM (``fakeserver.py``), one ``drover serve`` (this file run
with ``--child-serve``: the real server, whose provider stamps each text delta with the
monotonic clock as it leaves the adapter), and the clients (this process: one SSE stream and
one turn per session, all concurrent). CLOCK_MONOTONIC is shared by the processes of one
machine, so ``arrival - stamp`` is the delay from the provider adapter to an SSE client: the
journal, the hub, the SSE encoder, uvicorn, the socket and the client's parser.

Figures:
  * p50/p99 delay per delta at 100, 250 and 500 concurrent turns (every delta of every turn);
  * whether every turn completed, and deltas per second delivered;
  * memory per live stream: server RSS at the peak minus before the turns, ÷ turns;
  * replay: a client reconnecting after missing 10,000 events of a finished turn — time from
    the request to the last of them parsed, measured by the client.

Usage: ``.venv/bin/python bench/server_load.py [--turns 100,250,500] [--replay 10000]``;
``--clients httpx,aiohttp`` measures this checkout's server on each HTTP client the SDKs can
send through (``http_client``), alternating, instead of ``--before``'s two trees.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

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
DELAY = 0.02  # seconds between deltas of one stream: 50 deltas/s, a fast model
TEXT = 800  # characters per answer: 100 deltas, 2 s


# -- the server (child process) --------------------------------------------------------------------


class StampingProvider:
    """Wraps a real provider: each text delta's text becomes the time it left the adapter."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    @property
    def name(self) -> str:
        return str(self._inner.name)

    @property
    def model(self) -> str:
        return str(self._inner.model)

    async def stream(self, request: Any) -> AsyncGenerator[Any, None]:
        from dataclasses import replace

        from drover.core.model_stream import BlockDelta

        async for event in self._inner.stream(request):
            if isinstance(event, BlockDelta) and event.kind == "text":
                event = replace(event, data=f"{time.monotonic():.6f} ")
            yield event

    async def aclose(self) -> None:
        await self._inner.aclose()


class Diagnosis:
    """``BENCH_DIAG=1``: the server's collector pauses and event-loop lag, printed to stderr
    when it exits (a task that sleeps 10 ms and notes how late it wakes)."""

    def __init__(self) -> None:
        import gc

        self.pauses: list[tuple[float, int]] = []
        self.lags: list[float] = []
        self._started = 0.0
        gc.callbacks.append(self._collected)

    def _collected(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.pauses.append((time.perf_counter() - self._started, info["generation"]))

    async def watch(self) -> None:
        while True:
            started = time.perf_counter()
            await asyncio.sleep(0.01)
            self.lags.append(time.perf_counter() - started - 0.01)

    def report(self) -> None:
        total = sum(p for p, _ in self.pauses) * 1000
        worst = ", ".join(f"{p * 1000:.0f} ms (gen {g})" for p, g in sorted(self.pauses)[-5:])
        print(
            f"GC: {len(self.pauses)} collections, {total:.0f} ms; longest {worst}", file=sys.stderr
        )
        lags = sorted(self.lags)
        if lags:
            p50, p99 = lags[len(lags) // 2] * 1000, lags[int(len(lags) * 0.99)] * 1000
            print(f"loop lag: p50 {p50:.1f} ms, p99 {p99:.1f} ms", file=sys.stderr, flush=True)


def child_serve(argv: list[str]) -> int:
    from drover.cli.main import build_subparser
    from drover.cli.serve import run_serve
    from drover.config.settings import load_config
    from drover.providers.factory import create_provider

    args = build_subparser("serve").parse_args(argv)
    config = load_config()
    try:  # the provider as `drover serve` builds it (a tree from before server_config: as is)
        from drover.providers.factory import server_config

        config = server_config(config)
    except ImportError:
        pass
    if os.environ.get("BENCH_HTTP_CLIENT"):  # httpx | aiohttp: the SDKs' client, chosen
        from dataclasses import replace

        config = replace(config, http_client=os.environ["BENCH_HTTP_CLIENT"])
    inner = create_provider(args.model, config, base_url=args.base_url)
    diagnosis = Diagnosis() if os.environ.get("BENCH_DIAG") else None

    async def serve() -> int:
        watch = None
        if diagnosis is not None:
            watch = asyncio.get_running_loop().create_task(diagnosis.watch())
        try:
            return await run_serve(args, provider=StampingProvider(inner))
        finally:
            if watch is not None:
                watch.cancel()
                diagnosis.report()

    profile = os.environ.get("BENCH_PROFILE")  # a file: profile the server into it
    if not profile:
        return asyncio.run(serve())
    import cProfile

    with cProfile.Profile() as profiler:
        code = asyncio.run(serve())
    profiler.dump_stats(f"{profile}.{os.getpid()}")
    return code


# -- the clients -----------------------------------------------------------------------------------


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_queue_seconds(pid: int) -> float:
    """Time the process's threads spent runnable but waiting for a CPU (other processes had
    it): the machine's contention, as this process felt it."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat", encoding="ascii") as f:
                total += int(f.read().split()[1])
        except (FileNotFoundError, IndexError, ValueError):
            continue
    return total / 1e9


class Server:
    def __init__(
        self,
        fake_url: str,
        db: Path,
        workdir: Path,
        src: Path | None = None,
        http_client: str | None = None,
    ) -> None:
        """``src``: a ``src`` directory to import drover from instead of this checkout's (a
        copy of another commit, to compare two versions in one run); ``http_client``: the
        SDKs' client (None: as ``drover serve`` chooses)."""
        env = {**os.environ, "ANTHROPIC_API_KEY": "bench", "DROVER_CONFIG": "/nonexistent"}
        if http_client is not None:
            env["BENCH_HTTP_CLIENT"] = http_client
        if src is not None:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(src), env.get("PYTHONPATH")]))
        argv = [sys.executable, __file__, "--child-serve", "--port", "0", "--model"]
        argv += ["anthropic:fake-model", "--base-url", fake_url, "--db", str(db)]
        argv += ["--workdir", str(workdir), "--permission-mode", "allow"]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if "listening on" not in line:
            raise RuntimeError(f"drover serve did not start: {line!r}")
        self.url = line.rsplit(" ", 1)[1].strip()

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


async def _count(client: Any, url: str) -> int:
    """Read a replay to its terminal event, counting numbered events (no JSON parsing: the
    client's own cost is not the server's). Frames may straddle chunks: the last few bytes
    of each chunk are searched again with the next."""
    count, tail = 0, b""
    async with client.stream("GET", url) as response:
        async for chunk in response.aiter_bytes():
            window = tail + chunk
            # "\nid: " ends in the new bytes only if it starts after the tail's first byte.
            count += window.count(b"\nid: ", 0) - tail.count(b"\nid: ")
            if b"\nevent: done\n" in window:
                return count
            tail = window[-16:]
    return count


async def _stream(
    client: Any, url: str, ready: asyncio.Event, delays: list[float], until: str = "done"
) -> int:
    """Follow one session's events; returns how many numbered events arrived."""
    count = 0
    async with client.stream("GET", url) as response:
        event = ""
        async for line in response.aiter_lines():
            if line.startswith("event: "):
                event = line[7:]
                if event == "status":
                    ready.set()
            elif line.startswith("data: ") and event != "status":
                count += 1
                if event == "text_delta":
                    now = time.monotonic()
                    stamp = float(json.loads(line[6:])["text"])
                    delays.append(now - stamp)
                elif event in ("done", "incomplete", "error"):
                    if event != until:
                        raise RuntimeError(f"a turn ended {event}: {line[:200]}")
                    return count
    return count


async def load_run(server: Server, turns: int, fake_pid: int) -> dict[str, Any]:
    import httpx2

    limits = httpx2.Limits(max_connections=turns * 2 + 10, max_keepalive_connections=turns * 2)
    async with httpx2.AsyncClient(base_url=server.url, timeout=120, limits=limits) as client:
        sessions = [(await client.post("/v1/sessions", json={})).json()["id"] for _ in range(turns)]
        readies = [asyncio.Event() for _ in sessions]
        delays: list[list[float]] = [[] for _ in sessions]
        streams = [
            asyncio.create_task(_stream(client, f"/v1/sessions/{sid}/events", r, d))
            for sid, r, d in zip(sessions, readies, delays, strict=True)
        ]
        await asyncio.wait_for(asyncio.gather(*(r.wait() for r in readies)), 120)
        before = rss(server.proc.pid)
        cpu_before = cpu_seconds(server.proc.pid)
        waited_before = run_queue_seconds(server.proc.pid)
        fake_before, client_before = cpu_seconds(fake_pid), time.process_time()
        peak = [before]
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(0.05):
                peak[0] = max(peak[0], rss(server.proc.pid))

        sampler = threading.Thread(target=sample)
        sampler.start()
        started = time.monotonic()
        posts = [
            client.post(f"/v1/sessions/{sid}/messages", json={"content": "go"}) for sid in sessions
        ]
        for reply in await asyncio.gather(*posts):
            if reply.status_code != 202:
                raise RuntimeError(f"post refused: {reply.status_code} {reply.text}")
        await asyncio.wait_for(asyncio.gather(*streams), 600)
        wall = time.monotonic() - started
        cpu = cpu_seconds(server.proc.pid) - cpu_before
        waited = run_queue_seconds(server.proc.pid) - waited_before
        fake_cpu = cpu_seconds(fake_pid) - fake_before
        client_cpu = time.process_time() - client_before
        stop.set()
        sampler.join()
    flat = sorted(d for per in delays for d in per)
    return {
        "turns": turns,
        "deltas": len(flat),
        "p50": statistics.median(flat),
        "p99": flat[int(len(flat) * 0.99) - 1],
        "max": flat[-1],
        "wall": wall,
        "rate": len(flat) / wall,
        "per_stream": (peak[0] - before) / turns,
        "cpu_per_delta": cpu / max(len(flat), 1),
        # Share of one core each process used: near 100 % means that process was the limit.
        "cpu_share": (cpu / wall, fake_cpu / wall, client_cpu / wall),
        "waited": waited / wall,
    }


async def replay_run(server: Server, missed: int) -> dict[str, Any]:
    import httpx2

    async with httpx2.AsyncClient(base_url=server.url, timeout=120) as client:
        sid = (await client.post("/v1/sessions", json={})).json()["id"]
        ready = asyncio.Event()
        follow = asyncio.create_task(_stream(client, f"/v1/sessions/{sid}/events", ready, []))
        await ready.wait()
        await client.post(f"/v1/sessions/{sid}/messages", json={"content": "go"})
        live = await follow
        timings = []
        for _ in range(5):
            started = time.monotonic()
            got = await _count(client, f"/v1/sessions/{sid}/events?after=0")
            timings.append(time.monotonic() - started)
    return {
        "live": live,
        "replayed": got,
        "best": min(timings),
        "median": statistics.median(timings),
    }


def main() -> int:
    if sys.argv[1:2] == ["--child-serve"]:
        return child_serve(sys.argv[2:])
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", default="100,250,500")
    parser.add_argument("--replay", type=int, default=10_000)
    parser.add_argument("--clients", help="httpx,aiohttp: this checkout on each SDK client")
    add_version_options(
        parser, "every figure is measured for it and for this checkout in the same run, alternating"
    )
    options = parser.parse_args()
    forbid_network()
    tmp = Path(tempfile.mkdtemp(prefix="drover-bench-server-"))
    print_environment("drover serve under load", tmp)
    measured = versions(options)
    clients = options.clients.split(",") if options.clients else []
    if clients:
        measured = [(client, None) for client in clients]
    rows, replays = [], []
    with FakeServerProcess() as fake:
        for n, turns in enumerate(int(t) for t in options.turns.split(",")):
            # ABBA: neither version always runs first (the machine's load drifts).
            for label, src in measured if n % 2 == 0 else measured[::-1]:
                fake.load(
                    [{"text": words(TEXT)} for _ in range(turns)], chunk_size=CHUNK, delay=DELAY
                )
                client = label if clients else None
                db = tmp / f"load-{label}-{turns}.db"
                server = Server(fake.base_url, db, tmp, src, client)
                try:
                    r = asyncio.run(load_run(server, turns, fake.pid))
                finally:
                    server.stop()
                rows.append(
                    [
                        label,
                        r["turns"],
                        r["deltas"],
                        f"{r['p50'] * 1000:.1f}",
                        f"{r['p99'] * 1000:.1f}",
                        f"{r['max'] * 1000:.1f}",
                        f"{r['wall']:.1f}",
                        f"{r['rate']:.0f}",
                        f"{r['cpu_per_delta'] * 1e6:.0f}",
                        "/".join(f"{share * 100:.0f}" for share in r["cpu_share"]),
                        f"{r['waited'] * 100:.0f}",
                        human_bytes(r["per_stream"]),
                    ]
                )
                # Each row as soon as it is measured: a run cut short keeps what it measured.
                print(f"  {label}: {turns} turns done: {'  '.join(map(str, rows[-1]))}", flush=True)
        for label, src in measured if options.replay else []:
            # One answer of `replay` deltas, streamed as fast as the fake can.
            text = "x " * (options.replay * CHUNK // 2)
            fake.load([{"text": text}], chunk_size=CHUNK, delay=0)
            client = label if clients else None
            server = Server(fake.base_url, tmp / f"replay-{label}.db", tmp, src, client)
            try:
                replays.append((label, asyncio.run(replay_run(server, options.replay))))
            finally:
                server.stop()
    print()
    headers = ["server", "turns", "deltas", "p50 ms", "p99 ms", "max ms", "wall s", "deltas/s"]
    headers += ["CPU µs/delta", "CPU % srv/fake/cli", "srv waited %", "mem/stream"]
    print(table(headers, rows))
    print()
    for label, rp in replays:
        print(
            f"replay ({label}): {rp['replayed']} events after Last-Event-ID 0 of a finished turn "
            f"({rp['live']} were sent live): best {rp['best'] * 1000:.1f} ms, "
            f"median {rp['median'] * 1000:.1f} ms of 5"
        )
    print()
    print("p50/p99/max: delay of each text delta from leaving the provider adapter (server")
    print("process) to being parsed by its SSE client (this process), all turns concurrent;")
    pace = f"{CHUNK}-character deltas every {DELAY * 1000:.0f} ms"
    print(f"each turn streams {TEXT} characters in {pace}.")
    print("CPU µs/delta: the server process's user+system CPU during the turns ÷ deltas.")
    print("CPU % srv/fake/cli: CPU time of the server, the fake LLM and this client process")
    print("during the turns ÷ wall time (100 = one core busy the whole time).")
    print("srv waited %: time the server's threads were runnable but had no CPU (other")
    print("processes on the machine had it) ÷ wall time (/proc/PID/task/*/schedstat).")
    print("mem/stream: server RSS peak during the turns minus before them, divided by turns.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
