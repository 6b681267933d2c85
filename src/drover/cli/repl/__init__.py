"""``drover`` with no arguments (or a prompt, ``--continue``, ``--resume ID``): the REPL.

On a terminal it is the interactive program of :mod:`drover.cli.repl.app`; when stdin or
stdout is not a terminal, or the terminal cannot draw (``TERM`` unset or ``dumb``), it falls
back to the line mode of :mod:`drover.cli.repl.line`, which reads lines and prints like the
headless printer. Either first asks about the workdir's ``.mcp.json`` servers, once per project
(the line mode only when stdin is a terminal): they start only once approved.
"""

from __future__ import annotations

import argparse
import os
import sys

from drover.cli.build import cli_agent
from drover.cli.mcp import project_of
from drover.config.settings import load_config
from drover.mcp.approval import Ask, ask_once


def interactive_terminal() -> bool:
    streams = (sys.stdin, sys.stdout)
    if any(stream is None or not stream.isatty() for stream in streams):
        return False
    return os.environ.get("TERM", "") not in ("", "dumb")


async def run_repl(args: argparse.Namespace) -> int:
    if not interactive_terminal():
        from drover.cli.repl.line import run_line_repl

        return await run_line_repl(args)
    from drover.cli.repl.app import ask_at_the_prompt, run_interactive

    await ask_about_project_servers(args, ask_at_the_prompt)
    async with cli_agent(args) as agent:
        return await run_interactive(args, agent)


async def ask_about_project_servers(args: argparse.Namespace, ask: Ask) -> None:
    """Before the agent starts its MCP servers: ask once about the workdir's ``.mcp.json``
    servers nobody approved or declined yet, and keep the answer (:mod:`drover.mcp.approval`)."""
    project = project_of(args, load_config())
    if project is not None:
        await ask_once(project, ask)
