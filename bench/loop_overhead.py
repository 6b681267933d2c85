"""What the journal adds to a long tool loop (issue #5, figure 2).

One turn of 200 steps — each step the model streams ~200 characters of text and one call of a
cheap read-only tool (``ping``), then a final ~400-character answer — runs through the real
:class:`drover.turn.loop.AgentLoop`, a real provider (the official SDK, streaming) and drover's fake
LLM server (in its own process, over 127.0.0.1), in two ways:

* **on**: :class:`drover.runtime.runner.Runner` with a :class:`drover.store.SqliteStore` (a fresh
file
  per run): every event goes through the :class:`drover.journal.Journal`;
* **off**: a plain :class:`drover.turn.state.AgentSession` whose only sink records the events in
  memory.

The runs alternate on/off/off/on… (ABBA, so drift hits both alike) after one untimed warm-up of
each; the figure is the ratio of the medians, with the median of the per-pair ratios beside it.
The fake server's own time (request received → last byte sent, summed over the 201 requests)
is reported too, and the ratio of the drover-side time (wall − fake).

    .venv/bin/python bench/loop_overhead.py            # --runs 4 --steps 200 --protocol anthropic
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common import (
    CommitCounter,
    checkpointed_size,
    drover_provider,
    forbid_network,
    human_bytes,
    median,
    print_environment,
    run_drover,
    table,
    words,
)
from fakeserver import FakeServerProcess

from drover.tools import ToolContext, ToolRegistry, tool


@tool(read_only=True)
async def ping(ctx: ToolContext, n: int) -> str:
    """Answer a ping (a tool that costs next to nothing).

    Args:
        n: The step number.
    """
    return f"pong {n}"


def script(steps: int) -> list[dict[str, Any]]:
    responses: list[dict[str, Any]] = [
        {"text": words(200, seed=i), "tool_calls": [{"name": "ping", "input": {"n": i}}]}
        for i in range(steps)
    ]
    responses.append({"text": words(400, seed=steps)})
    return responses


@dataclass(slots=True)
class Sample:
    mode: str
    wall: float
    fake: float
    cpu: float


async def one_run(
    mode: str,
    fake: FakeServerProcess,
    provider: Any,
    steps: int,
    workdir: Path,
    index: int,
) -> Sample:
    fake.load(script(steps), chunk_size=8)
    db = workdir / f"loop-{index}.db" if mode == "on" else None
    run = await run_drover(
        provider=provider,
        tools=ToolRegistry([ping]),
        workdir=workdir,
        prompt="ping until you are done",
        max_turns=steps + 5,
        db=db,
    )
    if run.status != "done":
        raise RuntimeError(f"the {mode} run ended {run.status}, not done")
    fake.check_clean()
    return Sample(mode=mode, wall=run.seconds, fake=fake.server_seconds(), cpu=run.cpu)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=4, help="timed runs of each mode")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--protocol", choices=["anthropic", "openai"], default="anthropic")
    parser.add_argument("--dir", type=Path, default=None, help="where the databases go")
    args = parser.parse_args()
    forbid_network()
    counter = CommitCounter()
    counter.install()
    with (
        tempfile.TemporaryDirectory(prefix="drover-bench-", dir=args.dir) as tmp,
        FakeServerProcess() as fake,
    ):
        workdir = Path(tmp)
        print_environment("bench/loop_overhead.py — journal on vs off in a tool loop", workdir)
        print(
            f"workload: {args.steps} steps × (~200 chars of text + 1 call of a no-op tool), "
            f"then a ~400-char answer; {args.protocol} protocol, streaming, 8-char SSE chunks; "
            "fake server in a separate process"
        )
        url = fake.base_url if args.protocol == "anthropic" else fake.openai_base_url
        provider = drover_provider(args.protocol, url)
        try:
            # Warm-up (imports, connection pool, caches); the 'on' one also counts commits.
            with counter.watching():
                await one_run("on", fake, provider, args.steps, workdir, 0)
            counted = counter.counts(workdir / "loop-0.db")
            commits, statements = counted.commits, counted.statements
            size = checkpointed_size(workdir / "loop-0.db")
            await one_run("off", fake, provider, args.steps, workdir, 0)
            order = [("on", "off"), ("off", "on")]
            samples: list[Sample] = []
            for i in range(args.runs):
                for mode in order[i % 2]:
                    samples.append(await one_run(mode, fake, provider, args.steps, workdir, i + 1))
                    print(
                        f"  run {len(samples):2}: {mode:3}  wall {samples[-1].wall:.3f} s  "
                        f"fake {samples[-1].fake:.3f} s  cpu {samples[-1].cpu:.3f} s",
                        flush=True,
                    )
        finally:
            await provider.aclose()
    report(samples, args.steps, commits, statements, size)


def report(samples: list[Sample], steps: int, commits: int, statements: int, size: int) -> None:
    on = [s for s in samples if s.mode == "on"]
    off = [s for s in samples if s.mode == "off"]
    rows = []
    for mode, group in (("off (AgentSession + recorder)", off), ("on (Runner + SqliteStore)", on)):
        wall = median([s.wall for s in group])
        fake = median([s.fake for s in group])
        own = median([s.wall - s.fake for s in group])
        cpu = median([s.cpu for s in group])
        rows.append(
            [
                mode,
                len(group),
                f"{wall:.3f} s",
                f"{1000 * wall / (steps + 1):.2f} ms",
                f"{fake:.3f} s",
                f"{1000 * own / (steps + 1):.2f} ms",
                f"{1000 * cpu / (steps + 1):.2f} ms",
            ]
        )
    print()
    print(
        table(
            [
                "journal",
                "runs",
                "median wall",
                "per step",
                "fake's time",
                "drover per step",
                "CPU per step",
            ],
            rows,
        )
    )
    pairs = [b.wall / a.wall for a, b in zip(off, on, strict=True)]
    wall_ratio = median([s.wall for s in on]) / median([s.wall for s in off])
    own_on = median([s.wall - s.fake for s in on])
    own_off = median([s.wall - s.fake for s in off])
    print()
    print(f"on ÷ off, wall time (ratio of medians):        {wall_ratio:.3f}")
    print(f"on ÷ off, wall time (median of paired ratios): {median(pairs):.3f}")
    cpu_ratio = median([s.cpu for s in on]) / median([s.cpu for s in off])
    cpu_pairs = [b.cpu / a.cpu for a, b in zip(off, on, strict=True)]
    print(f"on ÷ off, drover-side time (wall − fake's):    {own_on / own_off:.3f}")
    print(f"on ÷ off, CPU time of the drover process:      {cpu_ratio:.3f}")
    print(f"on ÷ off, CPU time (median of paired ratios):  {median(cpu_pairs):.3f}")
    print(
        "journal cost per step (median on − off):       "
        f"{1000 * (own_on - own_off) / (steps + 1):.2f} ms"
    )
    print(
        f"SQLite commits in one 'on' run: {commits} ({commits / (steps + 1):.1f} per step, "
        f"{statements / (steps + 1):.1f} statements per step); "
        f"database after checkpoint: {human_bytes(size)}"
    )
    print()
    print("per step     median wall ÷ (steps + 1) model calls")
    print("fake's time  the fake server's own time (request received → last byte sent), summed")
    print("drover per step  (wall − fake's time) ÷ (steps + 1), median")
    print("CPU per step     CPU time of the benchmark process (all threads: the loop, the SDK,")
    print("                 the store's worker) ÷ (steps + 1), median; less sensitive than wall")
    print("                 time to other processes' load")


if __name__ == "__main__":
    asyncio.run(main())
