"""Tools the model can call: the seam, the ``@tool`` decorator, the registry and confinement.

The built-in coding tools live in :mod:`drover.tools.builtin`; the permission policy that
decides which calls need the user's consent is :mod:`drover.turn.permissions`.
"""

from __future__ import annotations

from drover.tools.base import Tool, ToolContext, ToolOutput
from drover.tools.builtin import BashTool, builtin_tools
from drover.tools.decorator import FunctionTool, tool
from drover.tools.registry import ToolRegistry, default_registry
from drover.tools.workspace import (
    MAX_OUTPUT_CHARS,
    OutputBuffer,
    cap_output,
    display_path,
    resolve_in_workdir,
)

__all__ = [
    "MAX_OUTPUT_CHARS",
    "BashTool",
    "FunctionTool",
    "OutputBuffer",
    "Tool",
    "ToolContext",
    "ToolOutput",
    "ToolRegistry",
    "builtin_tools",
    "cap_output",
    "default_registry",
    "display_path",
    "resolve_in_workdir",
    "tool",
]
