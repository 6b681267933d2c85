"""What the journal adds to a long tool loop, counted in instructions (issue #9, figure 2).

``loop_overhead.py`` times the same loop by CPU time. On this project's virtual machines the
CPU time of identical runs varies by ±30 % from one run to the next (its ``off`` runs of one
session spread from 1.65 s to 2.60 s), so a 5 % ratio is not resolved by a dozen runs. This
script counts instead what does not vary with the machine's load: the instructions the drover
process executes, under ``valgrind --tool=callgrind`` (Debian's ``valgrind`` package).

Each mode (journal ``on``: Runner + SqliteStore; ``off``: AgentSession + an in-memory
recorder, as in ``loop_overhead.py``) runs in a child process at two lengths, ``--steps`` and
three times as many; the difference of the two counts divided by the difference in steps is
the cost of one step, with the start-up (imports, opening the store, the first connection)
cancelled out. The fake LLM server runs in its own process, which valgrind does not follow.

Under valgrind the process runs ~50× slower, while the journal's time gate counts wall time;
each child stretches the journal's flush interval by ``--stretch`` (default 50) so the timer
fires as rarely as at native speed; two more runs of each version count its commits per step
to check it (natively 3.1; see ``loop_overhead.py``). What the count leaves out: the kernel's
side of system calls (SQLite's writes to its WAL are ~100 ``pwrite`` calls a step) and cache
misses, so it is a floor of the CPU cost, not the whole of it.

Counts of one run vary by ~0.1 % from one run to the next (how the streamed chunks fall into
reads), ~0.15 M instructions per step at the default lengths; ``--rounds N`` counts each run N
times and takes the median. ``--before SRC`` counts another commit's ``src/`` beside this
checkout's.

    .venv/bin/python bench/loop_instructions.py                 # --steps 20 --protocol openai
    .venv/bin/python bench/loop_instructions.py --before /tmp/before/src
    .venv/bin/python bench/loop_instructions.py --protocol responses   # the Responses API
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from common import (
    CommitCounter,
    add_version_options,
    count_instructions,
    drover_provider,
    forbid_network,
    median,
    need_valgrind,
    print_environment,
    src_env,
    stretch_flush_interval,
    table,
    versions,
)

MODES = ("off", "on")
_COMMITS = re.compile(r"^commits (\d+)$", re.MULTILINE)


async def child(mode: str, steps: int, protocol: str, stretch: float, commits: bool) -> None:
    """One run of the loop in this process (the one valgrind counts); with ``commits``, its
    commits are counted instead (the trace that counts them costs instructions of its own)."""
    import loop_overhead
    from fakeserver import FakeServerProcess

    forbid_network()
    stretch_flush_interval(stretch)
    counter = CommitCounter()
    if commits:
        counter.install()
    with (
        tempfile.TemporaryDirectory(prefix="drover-bench-") as tmp,
        FakeServerProcess() as fake,
    ):
        url = fake.base_url if protocol == "anthropic" else fake.openai_base_url
        provider = drover_provider(protocol, url)
        try:
            with counter.watching():
                await loop_overhead.one_run(mode, fake, provider, steps, Path(tmp), 0)
        finally:
            await provider.aclose()
        if commits:
            print(f"commits {counter.counts(Path(tmp) / 'loop-0.db').commits}", flush=True)


def count(
    src: Path | None, mode: str, steps: int, options: argparse.Namespace, *, commits: bool = False
) -> tuple[int, int]:
    """(instructions, commits) of one child run under callgrind (commits: 0 unless counted)."""
    arguments = [__file__, "--child", mode, "--steps", str(steps)]
    arguments += ["--protocol", options.protocol, "--stretch", str(options.stretch)]
    instructions, out = count_instructions(
        [sys.executable, *arguments, *(["--commits"] if commits else [])], src_env(src)
    )
    made = _COMMITS.search(out)
    return instructions, int(made.group(1)) if made else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--steps", type=int, default=20, help="the shorter run's steps")
    parser.add_argument(
        "--protocol", choices=["anthropic", "openai", "responses"], default="openai"
    )
    parser.add_argument("--stretch", type=float, default=50.0)
    parser.add_argument("--jobs", type=int, default=2, help="counted runs at once")
    parser.add_argument("--rounds", type=int, default=1, help="counts of each run (median)")
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--commits", action="store_true", help=argparse.SUPPRESS)
    add_version_options(parser, "counted beside this checkout's")
    args = parser.parse_args()
    if args.child:
        asyncio.run(child(args.child, args.steps, args.protocol, args.stretch, args.commits))
        return
    need_valgrind()
    print_environment("bench/loop_instructions.py — journal on vs off, instructions per step")
    short, long = args.steps, 3 * args.steps
    print(
        f"workload: loop_overhead.py's ({args.protocol}), {short} and {long} steps per mode; "
        f"instructions per step = difference ÷ {long - short}"
    )
    jobs = [
        (label, src, mode, steps)
        for r in range(args.rounds)
        for label, src in versions(args)
        for mode in (*MODES, "commits")[: 3 if r == 0 else 2]  # (commits: counted once)
        for steps in (short, long)
    ]

    def run(job: tuple[str, Path | None, str, int]) -> tuple[int, int]:
        _, src, mode, steps = job
        if mode == "commits":
            return count(src, "on", steps, args, commits=True)
        return count(src, mode, steps, args)

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        counted = list(pool.map(run, jobs))
    rounds: dict[tuple[str, str, int], list[tuple[int, int]]] = {}
    for job, c in zip(jobs, counted, strict=True):
        rounds.setdefault((job[0], job[2], job[3]), []).append(c)
    results = {key: (int(median([i for i, _ in cs])), cs[0][1]) for key, cs in rounds.items()}
    rows = []
    for label, _ in versions(args):
        per_step = {}
        for mode in MODES:
            (a, _), (b, _) = results[(label, mode, short)], results[(label, mode, long)]
            per_step[mode] = (b - a) / (long - short)
        commits = results[(label, "commits", long)][1] - results[(label, "commits", short)][1]
        rows.append(
            [
                label,
                f"{per_step['off'] / 1e6:.2f} M",
                f"{per_step['on'] / 1e6:.2f} M",
                f"{(per_step['on'] - per_step['off']) / 1e6:.2f} M",
                f"{per_step['on'] / per_step['off']:.3f}",
                f"{commits / (long - short):.1f}",
            ]
        )
    print()
    headers = ["src", "off / step", "on / step", "journal / step", "on ÷ off", "commits / step"]
    print(table(headers, rows))
    print()
    print("instructions executed by the drover process (all its threads), user space only")


if __name__ == "__main__":
    main()
