"""The journal and store alone, per tool step, counted in instructions (issue #31, figure 2).

``loop_instructions.py`` counts a whole loop (provider, SDK, fake LLM over HTTP, journal) and
takes the journal's share as the difference of two modes; that difference moves by ±0.25 M from
one run to the next. This script counts only what the journal and the SQLite store do: one
turn's steps sent straight to a :class:`~drover.journal.journal.Journal` on a
:class:`~drover.store.sqlite.store.SqliteStore` (no network, no provider), each step as a streamed
tool step's events arrive — ``step_started``, ``--deltas`` text deltas, the assistant message
(text and one tool call), the call's four states (its output ``--output`` characters) and the
results message. The flush gates run at step ends only (the time and size gates set out of
reach), so the count does not depend on how fast the machine runs. Each version runs at
``--steps`` and three times as many under ``valgrind --tool=callgrind``; the difference divided
by the difference in steps is the cost of one step, start-up (imports, migrations) cancelled
out. Counts of one run repeat to within ~0.1 %.

    .venv/bin/python bench/journal_step.py                          # --steps 20
    .venv/bin/python bench/journal_step.py --before /tmp/before/src
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from common import (
    add_version_options,
    count_instructions,
    need_valgrind,
    print_environment,
    src_env,
    table,
    versions,
    words,
)


async def child(steps: int, deltas: int, output: int) -> None:
    """The steps, in this process (the one valgrind counts)."""
    from drover.core.events import (
        AssistantMessage,
        StepStarted,
        TextDelta,
        ToolResults,
        ToolStateChanged,
        TurnStarted,
    )
    from drover.core.messages import (
        TextBlock,
        ToolResultBlock,
        ToolUseBlock,
        assistant_message,
        tool_result_message,
        user_message,
    )
    from drover.journal.journal import Journal
    from drover.store.sqlite.store import SqliteStore

    pieces = [f"{w} " for w in words(deltas * 8, seed=1).split()][:deltas]
    out = words(output, seed=2)
    with tempfile.TemporaryDirectory(prefix="drover-bench-") as tmp:
        async with SqliteStore(Path(tmp) / "step.db") as store:
            session = await store.create_session(workdir=tmp, model="m")
            turn = await store.begin_turn(session.id, user_message("go"), "bench:1:1", 3600)
            journal = Journal(store, session.id, flush_interval=1e9, flush_bytes=1 << 40)
            started = TurnStarted(turn_id=turn.id, session_id=session.id, user_message=None)
            await journal.send(started)
            for step in range(1, steps + 1):
                await journal.send(StepStarted(step=step))
                for piece in pieces:
                    await journal.send(TextDelta(text=piece))
                call_id = f"toolu_{step:024d}"
                call = ToolUseBlock(id=call_id, name="fetch_page", input={"n": step})
                said = assistant_message([TextBlock(text="".join(pieces)), call])
                await journal.send(AssistantMessage(message=said))
                base = {"call_id": call_id, "call_index": 0, "name": "fetch_page"}
                await journal.send(ToolStateChanged(**base, state="input-streaming"))
                for state in ("input-available", "running"):
                    await journal.send(ToolStateChanged(**base, state=state, input={"n": step}))
                ended = ToolStateChanged(
                    **base, state="output-available", input={"n": step}, output=out
                )
                await journal.send(ended)
                result = ToolResultBlock(tool_use_id=call_id, content=out)
                await journal.send(ToolResults(message=tool_result_message([result])))
            await journal.aclose()
            logged = len(await store.events_after(session.id))
    if logged < steps * 8:
        raise SystemExit(f"only {logged} events were logged for {steps} steps")


def count(src: Path | None, steps: int, args: argparse.Namespace) -> int:
    argv = [sys.executable, __file__, "--child", "--steps", str(steps)]
    argv += ["--deltas", str(args.deltas), "--output", str(args.output)]
    instructions, _ = count_instructions(argv, src_env(src))
    return instructions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--steps", type=int, default=20, help="the shorter run's steps")
    parser.add_argument("--deltas", type=int, default=25, help="text deltas per step")
    parser.add_argument("--output", type=int, default=2048, help="characters per tool output")
    parser.add_argument("--jobs", type=int, default=2, help="counted runs at once")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    add_version_options(parser, "counted beside this checkout's")
    args = parser.parse_args()
    if args.child:
        asyncio.run(child(args.steps, args.deltas, args.output))
        return
    need_valgrind()
    print_environment("bench/journal_step.py — the journal and store, instructions per tool step")
    short, long = args.steps, 3 * args.steps
    print(
        f"workload: {args.deltas} text deltas, a message, 4 call states ({args.output}-char "
        f"output) and the results per step; {short} and {long} steps; per step = difference "
        f"÷ {long - short}"
    )
    jobs = [(label, src, n) for label, src in versions(args) for n in (short, long)]
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        counted = list(pool.map(lambda job: count(job[1], job[2], args), jobs))
    rows = []
    for i in range(0, len(jobs), 2):
        per_step = (counted[i + 1] - counted[i]) / (long - short)
        rows.append([jobs[i][0], f"{counted[i] / 1e6:.1f} M", f"{per_step / 1e6:.3f} M"])
    print()
    print(table(["src", f"{short} steps", "per step"], rows))
    print("\ninstructions executed by the process (all its threads), user space only")


if __name__ == "__main__":
    main()
