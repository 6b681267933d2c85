"""What each real API says of one tool offered to the model, through drover's request builders."""

from __future__ import annotations

from typing import Any

from drover.core.model_stream import ToolSpec
from drover.providers.convert_anthropic import to_anthropic_tools
from drover.providers.convert_openai_chat import to_chat_tools
from drover.providers.convert_openai_responses import to_responses_tools
from drover.testing import validate_anthropic, validate_chat, validate_responses

PROTOCOLS = ("anthropic", "openai", "openai-responses")
_MESSAGES = [{"role": "user", "content": "go"}]


def tool_problems(protocol: str, name: str, schema: Any) -> list[str]:
    """The 400s the API of ``protocol`` answers a request offering this one tool with."""
    tools = [ToolSpec(name, "a tool", schema)]
    if protocol == "anthropic":
        return validate_anthropic({"messages": _MESSAGES, "tools": to_anthropic_tools(tools)})
    if protocol == "openai":
        return validate_chat({"messages": _MESSAGES, "tools": to_chat_tools(tools)})
    return validate_responses({"input": _MESSAGES, "tools": to_responses_tools(tools)}, _MESSAGES)
