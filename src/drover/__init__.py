"""drover: an agent runtime whose turns never lose work.

The public API is what this module exports (``__all__``; a test keeps the list exact).
:class:`Agent` is the entry point; :func:`tool` makes a tool of an ``async`` function (its
``ctx`` a :class:`ToolContext`, ``ToolContext[Deps]`` for a run's ``deps=``). A run's
:class:`RunResult` and the types of its fields (its ``pending`` messages and their content
blocks, its ``reason``), the events a turn emits and the error tree are here too. Everything
else is importable from its own module but may change.

The names are imported on first use, so that ``import drover.cli`` (every command) does not
load the whole library first.
"""

import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:
    from drover.agent.agent import Agent, PermissionCallback
    from drover.agent.result import RunResult
    from drover.agent.session import Session
    from drover.agent.turn_stream import TurnStream
    from drover.core.events import (
        AssistantMessage,
        Decision,
        Done,
        EndReason,
        Error,
        Event,
        Incomplete,
        PermissionRequest,
        TextDelta,
        ToolDone,
        ToolProgress,
        ToolStart,
        ToolStateChanged,
        TurnStarted,
        TurnStatus,
        event_to_dict,
    )
    from drover.core.messages import (
        ContentBlock,
        Message,
        TextBlock,
        ThinkingBlock,
        ToolResultBlock,
        ToolUseBlock,
        Usage,
    )
    from drover.errors import (
        ConfigError,
        DroverError,
        ProviderError,
        SessionBusyError,
        StoreError,
        ToolError,
    )
    from drover.tools.base import Tool, ToolContext, ToolOutput
    from drover.tools.decorator import tool

__all__ = [
    "Agent",
    "AssistantMessage",
    "ConfigError",
    "ContentBlock",
    "Decision",
    "Done",
    "DroverError",
    "EndReason",
    "Error",
    "Event",
    "Incomplete",
    "Message",
    "PermissionCallback",
    "PermissionRequest",
    "ProviderError",
    "RunResult",
    "Session",
    "SessionBusyError",
    "StoreError",
    "TextBlock",
    "TextDelta",
    "ThinkingBlock",
    "Tool",
    "ToolContext",
    "ToolDone",
    "ToolError",
    "ToolOutput",
    "ToolProgress",
    "ToolResultBlock",
    "ToolStart",
    "ToolStateChanged",
    "ToolUseBlock",
    "TurnStarted",
    "TurnStatus",
    "TurnStream",
    "Usage",
    "event_to_dict",
    "tool",
]

#: Where each public name is defined.
_ORIGINS: dict[str, str] = {
    "Agent": "drover.agent.agent",
    "AssistantMessage": "drover.core.events",
    "ConfigError": "drover.errors",
    "ContentBlock": "drover.core.messages",
    "Decision": "drover.core.events",
    "Done": "drover.core.events",
    "DroverError": "drover.errors",
    "EndReason": "drover.core.events",
    "Error": "drover.core.events",
    "Event": "drover.core.events",
    "Incomplete": "drover.core.events",
    "Message": "drover.core.messages",
    "PermissionCallback": "drover.agent.agent",
    "PermissionRequest": "drover.core.events",
    "ProviderError": "drover.errors",
    "RunResult": "drover.agent.result",
    "Session": "drover.agent.session",
    "SessionBusyError": "drover.errors",
    "StoreError": "drover.errors",
    "TextBlock": "drover.core.messages",
    "TextDelta": "drover.core.events",
    "ThinkingBlock": "drover.core.messages",
    "Tool": "drover.tools.base",
    "ToolContext": "drover.tools.base",
    "ToolDone": "drover.core.events",
    "ToolError": "drover.errors",
    "ToolOutput": "drover.tools.base",
    "ToolProgress": "drover.core.events",
    "ToolResultBlock": "drover.core.messages",
    "ToolStart": "drover.core.events",
    "ToolStateChanged": "drover.core.events",
    "ToolUseBlock": "drover.core.messages",
    "TurnStarted": "drover.core.events",
    "TurnStatus": "drover.core.events",
    "TurnStream": "drover.agent.turn_stream",
    "Usage": "drover.core.messages",
    "event_to_dict": "drover.core.events",
    "tool": "drover.tools.decorator",
}


def __getattr__(name: str) -> _typing.Any:
    origin = _ORIGINS.get(name)
    if origin is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module(origin), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
