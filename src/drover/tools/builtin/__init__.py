"""The built-in coding tools, confined to the working directory.

``read_file``, ``glob`` and ``grep`` are read-only; ``write_file``, ``edit_file`` and ``bash``
have side effects. Their names and inputs are a public contract (see ARCHITECTURE.md).
"""

from __future__ import annotations

from drover.tools.base import Tool
from drover.tools.builtin.bash import DEFAULT_TIMEOUT, BashTool
from drover.tools.builtin.files import edit_file, read_file, write_file
from drover.tools.builtin.search import glob, grep
from drover.tools.sandbox import SandboxStatus

__all__ = [
    "DEFAULT_TIMEOUT",
    "BashTool",
    "builtin_tools",
    "edit_file",
    "glob",
    "grep",
    "read_file",
    "write_file",
]


def builtin_tools(
    *, bash_timeout: float = DEFAULT_TIMEOUT, sandbox: SandboxStatus | None = None
) -> list[Tool]:
    """The built-in tools in the order they are offered to the model (``bash`` runs its
    commands in ``sandbox``; None runs them unsandboxed)."""
    bash = BashTool(bash_timeout, sandbox=sandbox)
    return [read_file, write_file, edit_file, bash, glob, grep]
