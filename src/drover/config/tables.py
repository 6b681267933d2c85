"""The config file's tables: what tools may do (``[permissions]``, ``[[hooks]]``, ``[mcp]``),
how model calls are retried (``[retries]``) and what ``drover serve`` prunes (``[retention]``).

::

    [permissions]
    allow = ["read_file", "bash(git status*)", "edit_file(src/**)"]   # run without asking
    deny = ["bash(rm -rf*)", "read_file(.env)"]                       # refused, even in allow mode

    [[hooks]]
    event = "pre_tool"                  # pre_tool | post_tool | turn_end
    tool = "bash"                       # a permission rule: which calls (pre/post_tool only)
    command = "./scripts/check-command" # run by bash (in bash's sandbox); the event on stdin
    timeout = 30                        # seconds (60)

    [mcp]
    approve_project = true              # or ["server", …]: a workdir's .mcp.json servers start
                                        # without asking

    [retries]                           # a model call that fails before its answer starts
    max = 4                             # tries again at most this often (0: never)
    backoff = 0.5                       # seconds before the first retry, doubling…
    backoff_max = 8                     # …up to this; an API's retry-after wins

Each is checked when the file is read: a problem is a :class:`~drover.errors.ConfigError`
naming the file and the setting. What the settings do: :mod:`drover.turn.permissions` (rules),
:mod:`drover.turn.hooks` (hooks), :mod:`drover.mcp.approval` (project servers),
:mod:`drover.providers.retry` (retries).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias, get_args

from drover.core.rules import Rule, parse_rules
from drover.errors import ConfigError

HookEvent: TypeAlias = Literal["pre_tool", "post_tool", "turn_end"]
HOOK_EVENTS: tuple[HookEvent, ...] = get_args(HookEvent)
#: Seconds a hook may run before it is stopped (and counts as failed).
DEFAULT_HOOK_TIMEOUT = 60.0
_PERMISSION_KEYS = ("allow", "deny")
_HOOK_KEYS = ("event", "tool", "command", "timeout")
_MCP_KEYS = ("approve_project",)
_RETRY_KEYS = ("max", "backoff", "backoff_max")


@dataclass(frozen=True, slots=True)
class HookSpec:
    """One ``[[hooks]]`` entry."""

    event: HookEvent
    command: str
    #: Which tool calls it is about (None: every call; always None for ``turn_end``).
    tool: Rule | None = None
    timeout: float = DEFAULT_HOOK_TIMEOUT
    #: Where it was configured (the file, and its position there).
    source: str = ""


def permissions_table(value: object, where: str) -> dict[str, Any]:
    """``[permissions]`` as :class:`~drover.config.settings.Config` fields."""
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: [permissions] must be a table with allow = […], deny = […]")
    out: dict[str, Any] = {}
    for key, item in value.items():
        if key not in _PERMISSION_KEYS:
            raise ConfigError(
                f"{where}: unknown setting 'permissions.{key}' (expected allow or deny)"
            )
        out[f"permissions_{key}"] = parse_rules(item, f"{where}: permissions.{key}")
    # Shown as where the rule came from: the file.
    return {k: tuple(r.with_source(where) for r in rules) for k, rules in out.items()}


def hooks_table(value: object, where: str) -> tuple[HookSpec, ...]:
    """``[[hooks]]`` (an array of tables) as hook specs."""
    if not isinstance(value, list):
        raise ConfigError(f"{where}: hooks must be [[hooks]] tables (event, tool, command)")
    return tuple(_hook(item, f"{where}: hooks[{i}]", where) for i, item in enumerate(value))


def _hook(value: object, where: str, source: str) -> HookSpec:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: expected a table with event and command")
    for key in value:
        if key not in _HOOK_KEYS:
            raise ConfigError(f"{where}: unknown key '{key}' (expected {', '.join(_HOOK_KEYS)})")
    event = value.get("event")
    if event not in HOOK_EVENTS:
        raise ConfigError(f"{where}.event: expected one of {', '.join(HOOK_EVENTS)}, got {event!r}")
    command = value.get("command")
    if not isinstance(command, str) or not command.strip():
        raise ConfigError(f"{where}.command: expected the command to run, as a string")
    tool = None
    if "tool" in value:
        if event == "turn_end":
            raise ConfigError(f"{where}.tool: a turn_end hook is about no tool call")
        raw = value["tool"]
        if not isinstance(raw, str):
            raise ConfigError(f'{where}.tool: expected a rule like "bash(git *)"')
        tool = Rule.parse(raw, f"{where}.tool")
    timeout = value.get("timeout", DEFAULT_HOOK_TIMEOUT)
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise ConfigError(f"{where}.timeout: expected a positive number of seconds")
    index = where.rsplit(": ", 1)[-1]
    return HookSpec(
        event=event,
        command=command,
        tool=tool,
        timeout=float(timeout),
        source=f"{source} {index}",
    )


def mcp_table(value: object, where: str) -> dict[str, Any]:
    """``[mcp]`` as :class:`~drover.config.settings.Config` fields."""
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: [mcp] must be a table (approve_project = true | [names])")
    out: dict[str, Any] = {}
    for key, item in value.items():
        if key not in _MCP_KEYS:
            raise ConfigError(
                f"{where}: unknown setting 'mcp.{key}' (expected {', '.join(_MCP_KEYS)})"
            )
        if isinstance(item, bool):
            out["mcp_approve_project"] = item
        elif isinstance(item, list) and all(isinstance(n, str) and n for n in item):
            out["mcp_approve_project"] = frozenset(item)
        else:
            raise ConfigError(
                f"{where}: mcp.approve_project must be true, false or a list of server names"
            )
    return out


def retries_table(value: object, where: str) -> dict[str, Any]:
    """``[retries]`` as :class:`~drover.config.settings.Config` fields: how often a model call is
    tried again (``max``, 0 for never) and how long it waits first (``backoff`` seconds, doubling up
    to ``backoff_max``; an API's ``retry-after`` still wins)."""
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: [retries] must be a table (max, backoff, backoff_max)")
    out: dict[str, Any] = {}
    for key, item in value.items():
        if key not in _RETRY_KEYS:
            raise ConfigError(
                f"{where}: unknown setting 'retries.{key}' (expected {', '.join(_RETRY_KEYS)})"
            )
        if key == "max":
            if isinstance(item, bool) or not isinstance(item, int) or not 0 <= item <= 100:
                raise ConfigError(f"{where}: retries.max must be a whole number from 0 to 100")
            out["retries_max"] = item
            continue
        if isinstance(item, bool) or not isinstance(item, int | float) or not 0 <= item <= 3600:
            raise ConfigError(f"{where}: retries.{key} must be a number of seconds, 0 to 3600")
        out[f"retries_{key}"] = float(item)
    backoff = out.get("retries_backoff", 0.0)
    if "retries_backoff_max" in out and out["retries_backoff_max"] < backoff:
        raise ConfigError(f"{where}: retries.backoff_max must not be under retries.backoff")
    return out


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")


def parse_duration(text: str) -> float:
    """Seconds in ``30d``, ``12h``, ``90m``, ``45s``, ``2w`` (``0s`` too); ``ValueError``
    saying why not."""
    found = _DURATION.match(text)
    if found is None:
        raise ValueError(f"not a duration: {text!r} (expected a number and s, m, h, d or w: 30d)")
    return float(found.group(1)) * _UNITS[found.group(2)]


_RETENTION_KEYS = ("older_than", "keep_last", "every")


def retention_table(value: object, where: str) -> dict[str, Any]:
    """``[retention]`` as :class:`~drover.config.settings.Config` fields (what ``drover serve``
    prunes).
    """
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: [retention] must be a table ({', '.join(_RETENTION_KEYS)})")
    out: dict[str, Any] = {}
    for key, item in value.items():
        if key not in _RETENTION_KEYS:
            raise ConfigError(
                f"{where}: unknown setting 'retention.{key}' "
                f"(expected {', '.join(_RETENTION_KEYS)})"
            )
        if key == "keep_last":
            if isinstance(item, bool) or not isinstance(item, int) or item < 0:
                raise ConfigError(f"{where}: retention.keep_last must be a whole number >= 0")
            out["retention_keep_last"] = item
            continue
        try:
            out[f"retention_{key}"] = parse_duration(str(item))
        except ValueError as exc:
            raise ConfigError(f"{where}: retention.{key}: {exc}") from None
    if out.get("retention_every", 1.0) <= 0:
        raise ConfigError(f"{where}: retention.every must be more than zero")
    return out
