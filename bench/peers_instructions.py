"""drover's journal next to its peers' persistence, counted in instructions (issue #9, figure 3).

``peers.py`` compares the three frameworks' persistence by CPU time, which on this project's
virtual machines varies by ±30 % between identical runs (see ``loop_instructions.py``). This
script counts instead the instructions each framework's process executes, under ``valgrind
--tool=callgrind``, on ``peers.py``'s workload (each step ~200 characters of text and one call
of a tool with a 2 KiB output; Chat Completions, streaming, 8-char chunks; drover's fake LLM
server in its own process, which valgrind does not follow). Each framework runs with its
persistence on and off at two lengths, ``--steps`` and three times as many; the difference
divided by the difference in model calls is the cost of one call, start-up (imports, the first
connection) cancelled out. drover's journal flush interval is stretched ``--stretch`` times, as
valgrind slows it (see ``loop_instructions.py``). User-space instructions only: the kernel's
side of each framework's writes is not in the count.

Run it in the peers' venv (``bench/run_peers.sh`` makes it):

    bench/.venv-peers/bin/python bench/peers_instructions.py     # --steps 10 --only ...
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import peers
from common import (
    count_instructions,
    forbid_network,
    need_valgrind,
    print_environment,
    quiet_environment,
    src_env,
    stretch_flush_interval,
    table,
)
from fakeserver import FakeServerProcess

MODES = ("off", "on")


async def child(framework: str, mode: str, steps: int, stretch: float) -> None:
    """One run of ``framework`` in this process (the one valgrind counts)."""
    forbid_network()
    quiet_environment()
    warnings.filterwarnings("ignore")
    peers.STEPS, peers.CALLS = steps, steps + 1  # (script() and the runners read them)
    if framework == "drover":
        stretch_flush_interval(stretch)
    with (
        tempfile.TemporaryDirectory(prefix="drover-bench-") as tmp,
        FakeServerProcess() as fake,
    ):
        db = Path(tmp) / f"{framework}.db" if mode == "on" else None
        sample = await peers.timed(framework, fake, db)
        if sample.requests != steps + 1:
            raise RuntimeError(f"{framework} made {sample.requests} model calls, not {steps + 1}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--steps", type=int, default=10, help="the shorter run's steps")
    parser.add_argument("--only", nargs="*", choices=peers.FRAMEWORKS, default=peers.FRAMEWORKS)
    parser.add_argument("--stretch", type=float, default=50.0)
    parser.add_argument("--jobs", type=int, default=2, help="counted runs at once")
    parser.add_argument("--child", choices=peers.FRAMEWORKS, help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        asyncio.run(child(args.child, args.mode, args.steps, args.stretch))
        return
    need_valgrind()
    unavailable = peers.availability()
    frameworks = [name for name in args.only if unavailable[name] is None]
    for name in args.only:
        if unavailable[name] is not None:
            print(f"  {name}: skipped — {unavailable[name]}")
    print_environment("bench/peers_instructions.py — persistence on vs off, instructions per call")
    short, long = args.steps, 3 * args.steps
    print(
        f"workload: peers.py's, {short} and {long} steps (+1 answer) per framework and mode; "
        f"instructions per model call = difference ÷ {long - short}"
    )
    jobs = [(name, mode, steps) for name in frameworks for mode in MODES for steps in (short, long)]

    def run(job: tuple[str, str, int]) -> int:
        name, mode, steps = job
        argv = [sys.executable, __file__, "--child", name, "--mode", mode]
        argv += ["--steps", str(steps), "--stretch", str(args.stretch)]
        return count_instructions(argv, src_env(None))[0]

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        counted = dict(zip(jobs, pool.map(run, jobs), strict=True))
    rows = []
    for name in frameworks:
        per_call = {
            mode: (counted[name, mode, long] - counted[name, mode, short]) / (long - short)
            for mode in MODES
        }
        rows.append(
            [
                name,
                f"{per_call['off'] / 1e6:.2f} M",
                f"{per_call['on'] / 1e6:.2f} M",
                f"{(per_call['on'] - per_call['off']) / 1e6:.2f} M",
                f"{per_call['on'] / per_call['off']:.3f}",
            ]
        )
    print()
    print(table(["framework", "off / call", "on / call", "persistence / call", "on ÷ off"], rows))
    print()
    print("instructions executed by the framework's process (all its threads), user space only")


if __name__ == "__main__":
    main()
