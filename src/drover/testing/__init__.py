"""drover's test kit: a local fake LLM server speaking three streaming APIs byte-for-byte.

* :mod:`.scenario` — what the fake model answers, request by request (YAML/JSON/dicts).
* :mod:`.wire` — the bytes of the Anthropic Messages, Chat Completions and Responses APIs.
* :mod:`.validate` — the history rules each real API enforces with a 400.
* :mod:`.app` / :mod:`.server` — the ASGI app, and the uvicorn server around it.
* :mod:`.pytest_plugin` — the ``fake_llm`` fixture.
"""

from drover.testing.app import NO_SCRIPT_LEFT, RecordedRequest
from drover.testing.scenario import (
    ContextOverflow,
    HttpError,
    Scenario,
    ScenarioOptions,
    ScriptedResponse,
    StreamError,
    ToolCall,
    UsageSpec,
    load_scenario,
)
from drover.testing.server import FakeLLMServer, serve
from drover.testing.validate import validate_anthropic, validate_chat, validate_responses

__all__ = [
    "NO_SCRIPT_LEFT",
    "ContextOverflow",
    "FakeLLMServer",
    "HttpError",
    "RecordedRequest",
    "Scenario",
    "ScenarioOptions",
    "ScriptedResponse",
    "StreamError",
    "ToolCall",
    "UsageSpec",
    "load_scenario",
    "serve",
    "validate_anthropic",
    "validate_chat",
    "validate_responses",
]
