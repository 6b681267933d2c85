"""drover: an agent runtime whose turns never lose work.

The public API is what this module exports (``__all__``; a test keeps the list exact).
:class:`Agent` is the entry point; :func:`tool` makes a tool of an ``async`` function; the
events a turn emits and the error tree are here too. Everything else is importable from its
own module but may change.
"""

from drover.agent import Agent, PermissionCallback, RunResult
from drover.errors import (
    ConfigError,
    DroverError,
    ProviderError,
    SessionBusyError,
    StoreError,
    ToolError,
)
from drover.events import (
    AssistantMessage,
    Decision,
    Done,
    Error,
    Event,
    Incomplete,
    PermissionRequest,
    TextDelta,
    ToolDone,
    ToolStart,
    ToolStateChanged,
    TurnStarted,
    TurnStatus,
    event_to_dict,
)
from drover.messages import Message, Usage
from drover.tools.base import Tool, ToolContext, ToolOutput
from drover.tools.decorator import tool

__all__ = [
    "Agent",
    "AssistantMessage",
    "ConfigError",
    "Decision",
    "Done",
    "DroverError",
    "Error",
    "Event",
    "Incomplete",
    "Message",
    "PermissionCallback",
    "PermissionRequest",
    "ProviderError",
    "RunResult",
    "SessionBusyError",
    "StoreError",
    "TextDelta",
    "Tool",
    "ToolContext",
    "ToolDone",
    "ToolError",
    "ToolOutput",
    "ToolStart",
    "ToolStateChanged",
    "TurnStarted",
    "TurnStatus",
    "Usage",
    "event_to_dict",
    "tool",
]
