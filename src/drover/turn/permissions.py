"""The permission policy: which tool calls run, which ask the user, and which are refused.

A call is decided in this order (:meth:`PermissionPolicy.verdict`):

1. a *deny rule* that covers it refuses it, whatever the mode and even for a read-only tool
   (the model is told which rule, and where it came from);
2. ``deny`` mode refuses every side-effecting tool (nothing overrides it: that mode promises
   no side effects at all);
3. a read-only tool runs;
4. ``allow`` mode runs it;
5. a tool the configuration trusts runs (its ``trusted`` property: an MCP server or tool
   marked ``"trust"``);
6. an *allow rule* or one of the session's "always" grants that covers it runs it;
7. ``sandboxed`` mode runs a call the sandbox fully contains: no network, writes at most in
   the working directory and none to its protected paths (see :mod:`drover.tools.sandbox`).
   A tool says so for one call with its ``contains(input)`` method, or for all its calls with
   its ``contained`` property; a tool with ``contains`` asked about without the call's input
   counts as not contained;
8. anything else asks.

Rules are those of :mod:`drover.core.rules` (``bash(git status*)``, ``write_file(src/**)``…), from
the config file's ``[permissions]``, the command line's ``--allow``/``--deny`` or an
:class:`~drover.agent.agent.Agent`'s ``allow=``/``deny=``. A command is matched on its parse
(:mod:`drover.core.shell`), a path both as written and where it leads (:func:`call_targets`). A
rule that refuses reading a file (a deny rule on ``read_file``) refuses ``grep`` that path
too, and keeps it out of what ``grep`` and ``glob`` report
(:meth:`PermissionPolicy.read_denied`).
The policy decides before a call runs; the call's tool checks the paths it really touches
when it runs through :class:`CallPolicy` (``ToolContext.rules``), so a link swapped in
between, or a file met in a directory ``grep`` searches, is judged as well.

An "always" answer is a rule of the same language (:func:`drover.core.rules.always_rule`):
``bash(<that exact command>)`` for ``bash``, the tool's name for every other tool. The policy
only decides; the prompt itself is the loop's permission round-trip.

A policy belongs to one session: its grants are that session's, kept in the journal by the
``remember`` callback the runner gives it (so another process, or this one after a restart,
sees them), and loaded again at every turn's start. The policy itself does no I/O but for
looking up where a path leads (its symbolic links).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeAlias, get_args

from drover.core.rules import Rule, argument_kind, main_argument
from drover.errors import ConfigError
from drover.tools.base import Tool
from drover.tools.workspace import path_target

PermissionMode: TypeAlias = Literal["ask", "allow", "deny", "sandboxed"]
PERMISSION_MODES: tuple[PermissionMode, ...] = get_args(PermissionMode)
Action: TypeAlias = Literal["run", "ask", "refuse"]

#: Keeps a grant durable (the session's journal); it may raise, the grant then lasts only in
#: memory.
Remember = Callable[[str], Awaitable[None]]
#: Where a session's "always" answers come from, as ``/permissions`` says.
GRANT_SOURCE = 'an "always" answer in this session'
DENY_MODE_TEXT = "Not run: the permission mode is deny, which refuses every tool with side effects."
#: The tool whose deny rules say which files may not be read, by any tool that reads them.
READ_TOOL = "read_file"
#: Tools that read the file their main argument names, as ``read_file`` does.
READERS = frozenset({"grep"})

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


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the policy decided for one call, and what decided it."""

    action: Action
    #: The rule (or grant) that decided, if one did.
    rule: Rule | None = None

    @property
    def refusal(self) -> str:
        """What the model is told of a refused call."""
        if self.rule is None:
            return DENY_MODE_TEXT
        where = f" ({self.rule.source})" if self.rule.source else ""
        return f'Not run: the deny rule "{self.rule.text}"{where} refuses this call.'


def rules_of(texts: Iterable[str | Rule], source: str) -> tuple[Rule, ...]:
    """Rules given as text (checked here) or already parsed."""
    return tuple(t if isinstance(t, Rule) else Rule.parse(t, source) for t in texts)


class PermissionPolicy:
    """The permission mode of a session, its allow and deny rules, and its "always" grants."""

    def __init__(
        self,
        mode: PermissionMode = "ask",
        *,
        always: Iterable[str] = (),
        remember: Remember | None = None,
        allow: Iterable[str | Rule] = (),
        deny: Iterable[str | Rule] = (),
        workdir: Path | None = None,
    ) -> None:
        if mode not in PERMISSION_MODES:
            raise ValueError(
                f"unknown permission mode {mode!r} (expected one of {', '.join(PERMISSION_MODES)})"
            )
        self._mode: PermissionMode = mode
        self.allow_rules = rules_of(allow, "allow=")
        self.deny_rules = rules_of(deny, "deny=")
        #: Paths in rules are taken from here (None: the current directory).
        self.workdir = None if workdir is None else str(workdir)
        self._always: dict[str, Rule] = {}
        self.set_grants(always)
        #: Where a new grant is kept (None: in memory only).
        self.remember = remember

    @property
    def mode(self) -> PermissionMode:
        return self._mode

    @property
    def always(self) -> frozenset[str]:
        """The rules the user granted "always" (they no longer ask in ``ask`` mode)."""
        return frozenset(self._always)

    def grant_always(self, rule: str) -> None:
        """Stop asking about what ``rule`` covers (in memory; :meth:`grant` also keeps it)."""
        parsed = _grant(rule)
        if parsed is not None:
            self._always[parsed.text] = parsed

    async def grant(self, rule: str) -> None:
        """The user answered "always": stop asking about what ``rule`` covers in this session,
        and keep the grant where every process sees it. A grant that cannot be kept still
        holds here (the user's answer stands); it is logged."""
        self.grant_always(rule)
        if self.remember is None:
            return
        try:
            await self.remember(rule)
        except Exception as exc:
            log.warning("could not keep the grant of %s for the session: %s", rule, exc)

    def set_grants(self, rules: Iterable[str]) -> None:
        """Replace the grants with the session's stored ones (at a turn's start)."""
        self._always = {}
        for rule in rules:
            self.grant_always(rule)

    def revoke(self, rule: str | None = None) -> None:
        """Forget one grant (``rule``) or all of them, in memory."""
        if rule is None:
            self._always.clear()
        else:
            self._always.pop(rule.strip(), None)

    # -- deciding ------------------------------------------------------------------------------

    def verdict(self, tool: Tool, input: Mapping[str, Any] | None = None) -> Verdict:
        """Whether a call of ``tool`` with ``input`` runs, asks or is refused (module doc)."""
        argument = main_argument(tool)
        names = (tool.name, READ_TOOL) if tool.name in READERS else (tool.name,)
        rules = (*self.deny_rules, *self.allow_rules, *self._always.values())
        # Where a path leads is looked up only when a rule with a glob is about this tool.
        about = any(r.glob is not None and any(r.names(n) for n in names) for r in rules)
        targets = call_targets(argument, input, self.workdir) if about else ()
        denied = self.deny_rule(tool, input, argument, targets)
        if denied is not None:
            return Verdict("refuse", denied)
        if self._mode == "deny" and not tool.read_only:
            return Verdict("refuse")
        if tool.read_only or self._mode == "allow" or is_trusted(tool):
            return Verdict("run")
        for rule in (*self.allow_rules, *self._always.values()):
            if rule.matches(
                tool.name, input, argument=argument, workdir=self.workdir, targets=targets
            ):
                return Verdict("run", rule)
        if self._mode == "sandboxed" and is_contained(tool, input):
            return Verdict("run")
        return Verdict("ask")

    def deny_rule(
        self,
        tool: Tool,
        input: Mapping[str, Any] | None,
        argument: str | None,
        targets: Sequence[str] | None,
    ) -> Rule | None:
        """The first deny rule that covers the call (those on ``read_file`` too, for a tool
        that reads the file its argument names)."""
        names = (tool.name, READ_TOOL) if tool.name in READERS else (tool.name,)
        for rule in self.deny_rules:
            for name in names:
                if rule.matches(
                    name,
                    input,
                    argument=argument,
                    workdir=self.workdir,
                    anywhere=True,
                    targets=targets,
                ):
                    return rule
        return None

    def read_denied(self, tool: Tool, path: Path) -> Rule | None:
        """The deny rule that keeps the file or directory ``path`` (absolute) from being read
        by ``tool``: one on ``read_file``, or on ``tool`` itself when its main argument is a
        path (``grep(secrets/**)``). Matched on ``path`` and where it leads."""
        argument = main_argument(tool)
        own = argument if argument is not None and argument_kind(argument) == "path" else None
        target = path_target(self.workdir or Path.cwd(), str(path))
        targets = () if target is None else (str(target),)
        read = {"path": str(path)}
        for rule in self.deny_rules:
            if rule.matches(
                READ_TOOL,
                read,
                argument="path",
                workdir=self.workdir,
                anywhere=True,
                targets=targets,
            ):
                return rule
            if own is not None and rule.matches(
                tool.name,
                {own: str(path)},
                argument=own,
                workdir=self.workdir,
                anywhere=True,
                targets=targets,
            ):
                return rule
        return None

    def needs_prompt(self, tool: Tool, input: Mapping[str, Any] | None = None) -> bool:
        """Whether running ``tool`` with ``input`` needs the user's consent first."""
        return self.verdict(tool, input).action == "ask"

    def denied_outright(self, tool: Tool, input: Mapping[str, Any] | None = None) -> bool:
        """Whether the call is refused without asking (a deny rule, or ``deny`` mode)."""
        return self.verdict(tool, input).action == "refuse"

    def __repr__(self) -> str:
        return (
            f"PermissionPolicy({self._mode!r}, allow={[r.text for r in self.allow_rules]}, "
            f"deny={[r.text for r in self.deny_rules]}, always={sorted(self._always)})"
        )


@dataclass(frozen=True, slots=True)
class CallPolicy:
    """The rules of one call as its tool applies them when it runs (``ToolContext.rules``,
    :class:`~drover.tools.base.CallRules`): ``verdict`` is what let the call run."""

    policy: PermissionPolicy
    tool: Tool
    input: Mapping[str, Any]
    verdict: Verdict

    def refusal(self, path: Path) -> str | None:
        argument = main_argument(self.tool)
        if argument is None or argument_kind(argument) != "path":
            return None
        real = {**self.input, argument: str(path)}
        targets = (str(path),)
        denied = self.policy.deny_rule(self.tool, real, argument, targets)
        if denied is not None:
            return Verdict("refuse", denied).refusal
        allowed = self.verdict.rule
        if allowed is None or allowed.matches(
            self.tool.name, real, argument=argument, workdir=self.policy.workdir, targets=targets
        ):
            return None
        where = f" ({allowed.source})" if allowed.source else ""
        base = Path(self.policy.workdir or Path.cwd()).resolve()
        shown = path.relative_to(base).as_posix() if path.is_relative_to(base) else str(path)
        return (
            f"Not run: this call now leads to '{shown}', which the allow rule "
            f'"{allowed.text}"{where} that let it run without asking does not cover (a '
            "symbolic link on the way changed after it was checked)."
        )

    def hides(self, path: Path) -> bool:
        return self.policy.read_denied(self.tool, path) is not None


def call_targets(
    argument: str | None, input: Mapping[str, Any] | None, workdir: str | None
) -> tuple[str, ...] | None:
    """Where a call's path argument leads, for :meth:`drover.core.rules.Rule.matches`: the path a
    file tool would touch (``()`` when the main argument is not a path; None when the path
    cannot be resolved)."""
    if argument is None or input is None or argument_kind(argument) != "path":
        return ()
    value = input.get(argument)
    if not isinstance(value, str):
        return ()
    target = path_target(workdir or Path.cwd(), value)
    return None if target is None else (str(target),)


def _grant(text: str) -> Rule | None:
    """A stored grant as a rule (one that does not parse is skipped, with a warning)."""
    try:
        return Rule.parse(text, GRANT_SOURCE)
    except ConfigError as exc:
        log.warning("ignoring the grant %r: %s", text, exc)
        return None
