"""The permission policy: which tool calls may run without asking the user.

Read-only tools never ask. A side-effecting tool asks in ``ask`` mode unless the user granted
its name "always" earlier in the session, runs without asking in ``allow`` mode, and is
refused without asking in ``deny`` mode (a grant does not override ``deny``: that mode
promises no side effects at all). ``sandboxed`` is ``ask``, except that a call the sandbox
fully contains runs without asking: no network, writes at most in the working directory and
none to its protected paths (see :mod:`drover.tools.sandbox`). A tool says so for one call
with its ``contains(input)`` method, or for all its calls with its ``contained`` property;
a tool with ``contains`` asked about without the call's input counts as not contained. The
policy only decides; the prompt itself is the loop's permission round-trip. No I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal, TypeAlias, get_args

from drover.tools.base import Tool

PermissionMode: TypeAlias = Literal["ask", "allow", "deny", "sandboxed"]
PERMISSION_MODES: tuple[PermissionMode, ...] = get_args(PermissionMode)


def is_contained(tool: Tool, input: Mapping[str, Any] | None = None) -> bool:
    """Whether the sandbox contains this call of ``tool`` (tools that do not say: no)."""
    contains = getattr(tool, "contains", None)
    if callable(contains):
        return input is not None and contains(input) is True
    return getattr(tool, "contained", False) is True


class PermissionPolicy:
    """The permission mode of a session plus the tools the user allowed "always"."""

    def __init__(self, mode: PermissionMode = "ask", *, always: Iterable[str] = ()) -> None:
        if mode not in PERMISSION_MODES:
            raise ValueError(
                f"unknown permission mode {mode!r} (expected one of {', '.join(PERMISSION_MODES)})"
            )
        self._mode: PermissionMode = mode
        self._always: set[str] = set(always)

    @property
    def mode(self) -> PermissionMode:
        return self._mode

    @property
    def always(self) -> frozenset[str]:
        """Names of the tools granted "always" (they no longer ask in ``ask`` mode)."""
        return frozenset(self._always)

    def grant_always(self, name: str) -> None:
        """The user answered "always" for tool ``name``: stop asking about it."""
        self._always.add(name)

    def needs_prompt(self, tool: Tool, input: Mapping[str, Any] | None = None) -> bool:
        """Whether running ``tool`` with ``input`` needs the user's consent first."""
        if tool.read_only or self._mode in ("allow", "deny"):
            return False
        if self._mode == "sandboxed" and is_contained(tool, input):
            return False
        return tool.name not in self._always

    def denied_outright(self, tool: Tool) -> bool:
        """Whether ``tool`` is refused without asking (a side-effecting tool in ``deny`` mode)."""
        return self._mode == "deny" and not tool.read_only

    def __repr__(self) -> str:
        return f"PermissionPolicy({self._mode!r}, always={sorted(self._always)})"
