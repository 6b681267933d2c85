"""The permission policy: which tool calls may run without asking the user.

Read-only tools never ask. A side-effecting tool asks in ``ask`` mode unless the user granted
its name "always" in the session or its configuration trusts it (its ``trusted`` property: an
MCP server or tool marked ``"trust"``), runs without asking in ``allow`` mode, and is
refused without asking in ``deny`` mode (a grant does not override ``deny``: that mode
promises no side effects at all). ``sandboxed`` is ``ask``, except that a call the sandbox
fully contains runs without asking: no network, writes at most in the working directory and
none to its protected paths (see :mod:`drover.tools.sandbox`). A tool says so for one call
with its ``contains(input)`` method, or for all its calls with its ``contained`` property;
a tool with ``contains`` asked about without the call's input counts as not contained. The
policy only decides; the prompt itself is the loop's permission round-trip.

A policy belongs to one session: its grants are that session's, kept in the journal by the
``remember`` callback the runner gives it (so another process, or this one after a restart,
sees them), and loaded again at every turn's start. The policy itself does no I/O.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Literal, TypeAlias, get_args

from drover.tools.base import Tool

PermissionMode: TypeAlias = Literal["ask", "allow", "deny", "sandboxed"]
PERMISSION_MODES: tuple[PermissionMode, ...] = get_args(PermissionMode)

#: Keeps a grant durable (the session's journal); it may raise, the grant then lasts only in
#: memory.
Remember = Callable[[str], Awaitable[None]]

log = logging.getLogger(__name__)


def is_trusted(tool: Tool) -> bool:
    """Whether the configuration lets ``tool`` run without asking (tools without the property:
    no). A trusted tool is still side-effecting: ``deny`` mode refuses it."""
    return getattr(tool, "trusted", False) is True


def is_contained(tool: Tool, input: Mapping[str, Any] | None = None) -> bool:
    """Whether the sandbox contains this call of ``tool`` (tools that do not say: no)."""
    contains = getattr(tool, "contains", None)
    if callable(contains):
        return input is not None and contains(input) is True
    return getattr(tool, "contained", False) is True


class PermissionPolicy:
    """The permission mode of a session plus the tools the user allowed "always"."""

    def __init__(
        self,
        mode: PermissionMode = "ask",
        *,
        always: Iterable[str] = (),
        remember: Remember | None = None,
    ) -> None:
        if mode not in PERMISSION_MODES:
            raise ValueError(
                f"unknown permission mode {mode!r} (expected one of {', '.join(PERMISSION_MODES)})"
            )
        self._mode: PermissionMode = mode
        self._always: set[str] = set(always)
        #: Where a new grant is kept (None: in memory only).
        self.remember = remember

    @property
    def mode(self) -> PermissionMode:
        return self._mode

    @property
    def always(self) -> frozenset[str]:
        """Names of the tools granted "always" (they no longer ask in ``ask`` mode)."""
        return frozenset(self._always)

    def grant_always(self, name: str) -> None:
        """Stop asking about tool ``name`` (in memory; :meth:`grant` also keeps it)."""
        self._always.add(name)

    async def grant(self, name: str) -> None:
        """The user answered "always" for tool ``name``: stop asking about it in this session,
        and keep the grant where every process sees it. A grant that cannot be kept still
        holds here (the user's answer stands); it is logged."""
        self._always.add(name)
        if self.remember is None:
            return
        try:
            await self.remember(name)
        except Exception as exc:
            log.warning("could not keep the grant of %s for the session: %s", name, exc)

    def set_grants(self, names: Iterable[str]) -> None:
        """Replace the grants with the session's stored ones (at a turn's start)."""
        self._always = set(names)

    def revoke(self, name: str | None = None) -> None:
        """Forget one grant (``name``) or all of them, in memory."""
        if name is None:
            self._always.clear()
        else:
            self._always.discard(name)

    def needs_prompt(self, tool: Tool, input: Mapping[str, Any] | None = None) -> bool:
        """Whether running ``tool`` with ``input`` needs the user's consent first."""
        if tool.read_only or self._mode in ("allow", "deny") or is_trusted(tool):
            return False
        if self._mode == "sandboxed" and is_contained(tool, input):
            return False
        return tool.name not in self._always

    def denied_outright(self, tool: Tool) -> bool:
        """Whether ``tool`` is refused without asking (a side-effecting tool in ``deny`` mode)."""
        return self._mode == "deny" and not tool.read_only

    def __repr__(self) -> str:
        return f"PermissionPolicy({self._mode!r}, always={sorted(self._always)})"
