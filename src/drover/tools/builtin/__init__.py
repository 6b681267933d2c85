"""The built-in coding tools, confined to the working directory.

``read_file``, ``glob`` and ``grep`` are read-only; ``write_file``, ``edit_file`` and ``bash``
have side effects. Their names and inputs are a public contract (see ARCHITECTURE.md). The file
and search tools follow the sandbox's hidden and protected paths, whatever its mode: ``--sandbox
off`` frees commands, not the file tools.
"""

from __future__ import annotations

from drover.tools.base import Tool
from drover.tools.builtin.bash import DEFAULT_TIMEOUT, BashTool
from drover.tools.builtin.files import edit_file, file_tools, read_file, write_file
from drover.tools.builtin.search import glob, grep, search_tools
from drover.tools.sandbox import SandboxStatus
from drover.tools.workspace import PathRules

__all__ = [
    "DEFAULT_TIMEOUT",
    "BashTool",
    "builtin_tools",
    "edit_file",
    "file_tools",
    "glob",
    "grep",
    "read_file",
    "search_tools",
    "write_file",
]


def builtin_tools(
    *, bash_timeout: float = DEFAULT_TIMEOUT, sandbox: SandboxStatus | None = None
) -> list[Tool]:
    """The built-in tools in the order they are offered to the model (``bash`` runs its
    commands in ``sandbox``; None runs them unsandboxed, and the file tools then follow the
    default hidden and protected paths)."""
    bash = BashTool(bash_timeout, sandbox=sandbox)
    rules = PathRules.of(sandbox.settings) if sandbox is not None else None
    reader, writer, editor = file_tools(rules)
    finder, searcher = search_tools(rules)
    return [reader, writer, editor, bash, finder, searcher]
