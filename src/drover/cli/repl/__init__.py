"""``drover`` with no arguments (or a prompt, ``--continue``, ``--resume ID``): the REPL.

On a terminal it is the interactive program of :mod:`drover.cli.repl.app`; when stdin or
stdout is not a terminal, or the terminal cannot draw (``TERM`` unset or ``dumb``), it falls
back to the line mode of :mod:`drover.cli.repl.line`, which reads lines and prints like the
headless printer.
"""

from __future__ import annotations

import argparse
import os
import sys

from drover.cli.build import cli_agent


def interactive_terminal() -> bool:
    streams = (sys.stdin, sys.stdout)
    if any(stream is None or not stream.isatty() for stream in streams):
        return False
    return os.environ.get("TERM", "") not in ("", "dumb")


async def run_repl(args: argparse.Namespace) -> int:
    if not interactive_terminal():
        from drover.cli.repl.line import run_line_repl

        return await run_line_repl(args)
    from drover.cli.repl.app import run_interactive

    async with cli_agent(args) as agent:
        return await run_interactive(args, agent)
