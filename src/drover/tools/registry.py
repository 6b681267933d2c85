"""The tool registry: the set of tools offered to the model in one session, by name.

There is no process-wide registry: :func:`default_registry` builds a fresh one holding the
built-in tools each time it is called, and callers compose their own with
:meth:`ToolRegistry.register`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from drover.core.model_stream import ToolSpec
from drover.tools.base import Tool
from drover.tools.builtin import DEFAULT_TIMEOUT, builtin_tools
from drover.tools.sandbox import SandboxStatus


class ToolRegistry:
    """Tools by name, kept in registration order (the order the model sees them in)."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        """Add ``tool``; ``ValueError`` if a tool of that name is already registered."""
        if tool.name in self._tools:
            raise ValueError(f"a tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return list(self._tools)

    def specs(self) -> list[ToolSpec]:
        """What the model is offered, in registration order (stable, so prompts cache)."""
        return [ToolSpec(t.name, t.description, t.input_schema) for t in self._tools.values()]

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> Iterator[Tool]:
        return iter(list(self._tools.values()))

    def __repr__(self) -> str:
        return f"ToolRegistry({', '.join(self._tools)})"


def default_registry(
    *, bash_timeout: float = DEFAULT_TIMEOUT, sandbox: SandboxStatus | None = None
) -> ToolRegistry:
    """A new registry holding the built-in tools (a fresh one on every call); ``sandbox`` is
    where ``bash`` runs its commands (None: unsandboxed)."""
    return ToolRegistry(builtin_tools(bash_timeout=bash_timeout, sandbox=sandbox))
