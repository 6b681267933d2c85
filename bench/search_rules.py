"""What the rules and the bounded search cost (issue #43): ``grep`` over drover's own tree, and a
permission verdict on a command and on a path.

``grep`` now matches in a child process (so a regex that backtracks cannot hold drover's GIL):
the figure is the time of one call, walk included, over this checkout's ``src/`` and
``tests/`` (~600 files), for a pattern that matches often and one that never does. A verdict
parses the command with the bash grammar (cached per command) and resolves a path's links:
the figure is the time of one ``PermissionPolicy.verdict`` with ten allow and ten deny rules,
first sight of a command (no cache) and again (cached).

Each version runs in a child process of its own (``--before SRC`` adds another commit's
``src/``, the runs alternating). Nothing leaves the machine.

    .venv/bin/python bench/search_rules.py [--runs 7] [--before /tmp/main-src/src]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap

from common import REPO, add_version_options, median, print_environment, src_env, table, versions

CHILD = textwrap.dedent(
    """
    import asyncio, json, sys, time
    from pathlib import Path
    from drover.turn.permissions import PermissionPolicy
    from drover.tools.base import ToolContext
    from drover.tools.builtin import builtin_tools, search_tools

    root, runs = Path(sys.argv[1]), int(sys.argv[2])
    grep = search_tools()[1]
    ctx = ToolContext(workdir=root)

    async def grep_times(pattern):
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            await grep.run({"pattern": pattern, "path": "src"}, ctx)
            await grep.run({"pattern": pattern, "path": "tests"}, ctx)
            times.append((time.perf_counter() - start) / 2)
        return sorted(times)[len(times) // 2]

    tools = {t.name: t for t in builtin_tools()}
    allow = [f"bash(tool{i} *)" for i in range(9)] + ["bash(git status*)"]
    deny = [f"bash(danger{i}*)" for i in range(9)] + ["read_file(.env)"]
    policy = PermissionPolicy("ask", allow=allow, deny=deny, workdir=root)

    def verdict_time(tool, make_input, n=2000):
        start = time.perf_counter()
        for i in range(n):
            policy.verdict(tools[tool], make_input(i))
        return (time.perf_counter() - start) / n

    out = {
        "grep_often": asyncio.run(grep_times("def ")),
        "grep_never": asyncio.run(grep_times("zq9xv-never")),
        "bash_new": verdict_time("bash", lambda i: {"command": f"git status --short {i} && ls"}),
        "bash_cached": verdict_time("bash", lambda i: {"command": "git status --short && ls"}),
        "path": verdict_time("write_file", lambda i: {"path": f"src/drover/f{i}.py"}),
    }
    print(json.dumps(out))
    """
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    add_version_options(parser, "measured beside this checkout")
    options = parser.parse_args()
    print_environment("search and rules")
    results: dict[str, list[dict[str, float]]] = {}
    for _round in range(3):
        for label, src in versions(options):
            done = subprocess.run(
                [sys.executable, "-c", CHILD, str(REPO), str(options.runs)],
                env=src_env(src),
                capture_output=True,
                text=True,
                check=True,
            )
            results.setdefault(label, []).append(json.loads(done.stdout.splitlines()[-1]))
    rows = []
    for label, runs in results.items():
        figure = {key: median([r[key] for r in runs]) for key in runs[0]}
        rows.append(
            [
                label,
                f"{figure['grep_often'] * 1000:.1f} ms",
                f"{figure['grep_never'] * 1000:.1f} ms",
                f"{figure['bash_new'] * 1e6:.0f} µs",
                f"{figure['bash_cached'] * 1e6:.0f} µs",
                f"{figure['path'] * 1e6:.0f} µs",
            ]
        )
    headers = ["version", "grep (matches)", "grep (none)", "bash verdict", "cached", "path verdict"]
    print(table(headers, rows))
    print(
        "grep: one call over src/ or tests/ (median of the runs, of three rounds); verdicts: "
        "one PermissionPolicy.verdict with 10 allow and 10 deny rules, a new command each time, "
        "the same command (cached parse), a write_file path (links resolved)."
    )


if __name__ == "__main__":
    main()
